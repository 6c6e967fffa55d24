/* Vocabulary for token masks: token byte strings, flags, and a byte trie in
 * preorder (see vocab.h). The trie lets a mask computation share
 * the parser work of common prefixes and skip a whole subtree when a prefix
 * is rejected. Per-tokenizer tables over it (character counts, JSON string
 * content tokens, the content frontier) let token_mask.c decide large parts
 * of the vocabulary without visiting them. */
#include "grammar/vocab.h"

#include "grammar/shared_cache.h"

#include "base/alloc.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define VOCAB_MAX_TOKENS (1u << 24)
#define VOCAB_MAX_TOKEN_BYTES 65535u /* depth is stored in 16 bits */

typedef struct sort_ctx {
    const uint8_t *data;
    const uint64_t *off;
} sort_ctx;

/* qsort has no context argument in C11; a merge sort with one keeps the
 * code reentrant (no hidden globals). */
static int tok_cmp(const sort_ctx *c, uint32_t a, uint32_t b) {
    uint64_t la = c->off[a + 1] - c->off[a], lb = c->off[b + 1] - c->off[b];
    uint64_t n = la < lb ? la : lb;
    int r = memcmp(c->data + c->off[a], c->data + c->off[b], (size_t)n);
    if (r) return r;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void merge_sort(const sort_ctx *c, uint32_t *v, uint32_t *tmp, uint32_t n) {
    for (uint32_t w = 1; w < n; w *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * w) {
            uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = tok_cmp(c, v[i], v[j]) <= 0 ? v[i++] : v[j++];
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, n * sizeof(uint32_t));
        if (w > UINT32_MAX / 2) break;
    }
}

/* Per-node arrays of a large vocabulary: a mask's walk reads them at nodes
 * far apart (it skips whole subtrees), so on 4 KiB pages nearly every
 * visit misses the TLB; 2 MiB pages where the kernel gives them on
 * request. Freed with free(). */
static void *node_array(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    if (bytes == 0) bytes = 1;
#ifdef MADV_HUGEPAGE
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge / 2) {
        size_t sz = (bytes + huge - 1) / huge * huge;
        void *p = aligned_alloc(huge, sz);
        if (p) madvise(p, sz, MADV_HUGEPAGE);
        return p;
    }
#endif
    return malloc(bytes);
}

#define DEC_OFF 0xFF /* build_frontier: the path above left string content */

/* The content frontier (mt_frontier) in one preorder pass. dec[d]: the
 * decoder state before the nodes at depth d under the last node visited
 * at depth d - 1 (their parent), DEC_OFF once the path left string content.
 * cok[i] bit q: from decoder state q, every path from node i to the end of
 * its character is well formed. */
static di_status build_frontier(di_grammar_vocab *v, const uint8_t *cok, uint8_t *dec, di_error *err) {
    uint32_t cap = 0, nn = v->n_nodes;
    for (uint32_t i = 0; i < nn; i++) {
        uint32_t d = v->depth[i];
        uint8_t q = d ? dec[d] : MT_U8_START, b = v->byte[i], below = DEC_OFF;
        bool front = false, gok = false;
        if (q == MT_U8_START) front = b < 0x80 ? !mt_json_content(b) : !((cok[i] >> MT_U8_START) & 1);
        v->gspan[i].idx = v->n_frontier;
        if (front) {
            if (v->n_frontier == cap) {
                uint32_t nc = cap ? cap * 2 : 1024;
                mt_frontier *x = di_realloc_array(v->frontier, nc, sizeof *x);
                if (!x) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
                v->frontier = x, cap = nc;
            }
            uint32_t sk = v->skip[i];
            v->frontier[v->n_frontier++] = (mt_frontier){i, sk, v->tok_start[i], v->tok_start[sk]};
        } else if (q != DEC_OFF) {
            below = mt_u8_next(q, b); /* well formed: cok of the character's first node */
            gok = below == MT_U8_START;
        }
        v->gspan[i].cnt = gok ? 0 : UINT32_MAX; /* counted below */
        dec[d + 1] = below;
    }
    for (uint32_t i = 0; i < nn; i++) {
        if (v->gspan[i].cnt == UINT32_MAX) continue;
        uint32_t sk = v->skip[i];
        v->gspan[i].cnt = (sk < nn ? v->gspan[sk].idx : v->n_frontier) - v->gspan[i].idx;
    }
    /* per frontier node, the depth, byte and characters on the path to it
     * (those of its first token's bytes above the node) in one array */
    v->fnode = di_malloc_array(v->n_frontier ? v->n_frontier : 1, sizeof *v->fnode);
    if (!v->fnode) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; k < v->n_frontier; k++) {
        const mt_frontier *f = &v->frontier[k];
        const uint8_t *s = v->data + v->off[v->trie_tok[f->tok_lo]];
        uint32_t ch = 0, dep = v->depth[f->node];
        for (uint32_t j = 0; j < dep; j++) ch += (s[j] & 0xC0) != 0x80;
        /* both at most VOCAB_MAX_TOKEN_BYTES */
        v->fnode[k] = (mt_fnode){(uint16_t)ch, (uint16_t)dep, v->byte[f->node]};
    }
    return DI_OK;
}

static di_status build_trie(di_grammar_vocab *v, di_error *err) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->flags[i] == DI_GRAMMAR_TOKEN_NORMAL && v->off[i + 1] > v->off[i]) n++;
    uint32_t *ids = di_malloc_array(n + 1, sizeof(uint32_t));
    uint32_t *tmp = di_malloc_array(n + 1, sizeof(uint32_t));
    if (!ids || !tmp) { free(ids); free(tmp); return di_error_set(err, DI_ERR_NOMEM, "out of memory"); }
    n = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->flags[i] == DI_GRAMMAR_TOKEN_NORMAL && v->off[i + 1] > v->off[i]) {
            ids[n++] = i;
            total += v->off[i + 1] - v->off[i];
        }
    sort_ctx c = {v->data, v->off};
    merge_sort(&c, ids, tmp, n);
    free(tmp);
    /* Node count is at most the total token bytes. */
    if (total > UINT32_MAX - 1) { free(ids); return di_error_set(err, DI_ERR_RANGE, "vocabulary too large"); }
    uint32_t cap = (uint32_t)total;
    v->byte = node_array(cap, 1);
    v->depth = node_array(cap, sizeof(uint16_t));
    v->skip = node_array(cap, sizeof(uint32_t));
    v->tok_start = node_array((size_t)cap + 1, sizeof(uint32_t));
    uint32_t *stack = di_malloc_array(VOCAB_MAX_TOKEN_BYTES + 1, sizeof(uint32_t));
    if (!v->byte || !v->depth || !v->skip || !v->tok_start || !stack) {
        free(ids); free(stack);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    uint32_t nn = 0, prev = UINT32_MAX, last_node = 0;
    /* tok_start[i] counts tokens ending at nodes < i; filled by counting. */
    uint32_t *end_node = di_malloc_array(n + 1, sizeof(uint32_t));
    if (!end_node) { free(ids); free(stack); return di_error_set(err, DI_ERR_NOMEM, "out of memory"); }
    for (uint32_t t = 0; t < n; t++) {
        uint32_t id = ids[t];
        const uint8_t *s = v->data + v->off[id];
        uint32_t len = (uint32_t)(v->off[id + 1] - v->off[id]);
        uint32_t lcp = 0;
        if (prev != UINT32_MAX) {
            const uint8_t *p = v->data + v->off[prev];
            uint32_t pl = (uint32_t)(v->off[prev + 1] - v->off[prev]);
            while (lcp < len && lcp < pl && p[lcp] == s[lcp]) lcp++;
        }
        for (uint32_t d = lcp; d < len; d++) {
            v->byte[nn] = s[d];
            v->depth[nn] = (uint16_t)d;
            nn++;
        }
        last_node = lcp == len ? last_node : nn - 1; /* duplicate bytes share the node */
        end_node[t] = last_node;
        prev = id;
    }
    v->n_nodes = nn;
    /* skip[i]: first node after i's subtree = next node with depth <= depth[i]. */
    uint32_t sp = 0;
    for (uint32_t i = 0; i < nn; i++) {
        while (sp && v->depth[stack[sp - 1]] >= v->depth[i]) v->skip[stack[--sp]] = i;
        stack[sp++] = i;
    }
    while (sp) v->skip[stack[--sp]] = nn;
    memset(v->tok_start, 0, ((size_t)nn + 1) * sizeof(uint32_t));
    for (uint32_t t = 0; t < n; t++) v->tok_start[end_node[t] + 1]++;
    for (uint32_t i = 0; i < nn; i++) v->tok_start[i + 1] += v->tok_start[i];
    v->trie_tok = ids; /* end_node is nondecreasing in t, so ids is in node order */
    /* subtree byte sets, children before parents (reverse preorder); the
     * children of i are i+1, skip[i+1], ... below skip[i] */
    v->sub = node_array(nn ? nn : 1, sizeof(gb_bits));
    if (!v->sub) { free(end_node); free(stack); return di_error_set(err, DI_ERR_NOMEM, "out of memory"); }
    v->u8ok = node_array(nn ? nn : 1, sizeof(uint16_t));
    v->maxdep = node_array(nn ? nn : 1, sizeof(uint16_t));
    v->maxch = node_array(nn ? nn : 1, sizeof(uint16_t));
    v->cskip = node_array(nn ? nn : 1, sizeof(uint32_t));
    v->nch = di_malloc_array(v->n_tokens ? v->n_tokens : 1, sizeof(uint16_t));
    v->esc_tail = calloc(v->n_tokens ? v->n_tokens : 1, 1);
    v->gspan = node_array(nn ? nn : 1, sizeof(mt_gspan));
    uint8_t *cok = malloc(nn ? nn : 1), *dec = malloc((size_t)VOCAB_MAX_TOKEN_BYTES + 2);
    if (!v->u8ok || !v->maxdep || !v->maxch || !v->cskip || !v->nch || !v->esc_tail || !v->gspan || !cok || !dec) {
        free(end_node), free(stack), free(cok), free(dec);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    for (uint32_t t = 0; t < v->n_tokens; t++) {
        uint32_t k = 0;
        for (uint64_t j = v->off[t]; j < v->off[t + 1]; j++) k += (v->data[j] & 0xC0) != 0x80;
        v->nch[t] = (uint16_t)(k < UINT16_MAX ? k : UINT16_MAX);
        if (v->flags[t] != DI_GRAMMAR_TOKEN_NORMAL || v->off[t + 1] == v->off[t]) continue;
        uint8_t e = v->data[v->off[t]];
        bool tail = e && strchr("\"\\/bfnrt", e);
        for (uint64_t j = v->off[t] + 1; tail && j < v->off[t + 1]; j++) tail = mt_json_content(v->data[j]);
        if (tail) v->esc_tail[t] = e;
    }
    /* JSON string content tokens by length (a per-tokenizer table, like
     * XGrammar's tokenizer info): content_le[r] holds the tokens of at most
     * r characters made of string content only (token_mask.c's fast path) */
    uint32_t max_nch = 0;
    v->content_all = true;
    for (uint32_t t = 0; t < v->n_tokens; t++) {
        if (v->nch[t] > max_nch && v->nch[t] <= MT_CONTENT_MAX_CHARS) max_nch = v->nch[t];
        if (v->nch[t] > MT_CONTENT_MAX_CHARS) v->content_all = false;
    }
    size_t words = ((size_t)v->n_tokens + 31) / 32;
    v->content_le = calloc(((size_t)max_nch + 1) * words, sizeof(uint32_t));
    if (!v->content_le) {
        free(end_node), free(stack), free(cok), free(dec);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    v->content_max = max_nch;
    for (uint32_t t = 0; t < v->n_tokens; t++) {
        if (v->flags[t] != DI_GRAMMAR_TOKEN_NORMAL || v->off[t + 1] == v->off[t] || v->nch[t] > max_nch) continue;
        uint8_t q = MT_U8_START;
        bool ok = true;
        for (uint64_t j = v->off[t]; ok && j < v->off[t + 1]; j++) {
            uint8_t x = v->data[j];
            q = mt_u8_next(q, x);
            ok = q != MT_U8_BAD && (x >= 0x80 || mt_json_content(x));
        }
        if (ok) v->content_le[(size_t)v->nch[t] * words + t / 32] |= 1u << (t % 32);
    }
    for (uint32_t r = 1; r <= max_nch; r++)
        for (size_t w = 0; w < words; w++) v->content_le[r * words + w] |= v->content_le[(r - 1) * words + w];
    for (uint32_t i = nn; i-- > 0;) {
        gb_bits b = {{0}};
        gb_bits_set(&b, v->byte[i]);
        /* u8ok: node i's byte is valid in state q and every child subtree
         * is well-formed from the state after it; cok: the same up to the
         * end of the character that the byte starts or continues */
        uint16_t ok = 0;
        uint8_t cq = 0;
        for (uint8_t q = 0; q < MT_U8_N; q++) {
            uint8_t nq = mt_u8_next(q, v->byte[i]);
            bool all = nq != MT_U8_BAD, call = all;
            for (uint32_t ch = i + 1; all && ch < v->skip[i]; ch = v->skip[ch]) all = (v->u8ok[ch] >> nq) & 1;
            for (uint32_t ch = i + 1; call && nq != MT_U8_START && ch < v->skip[i]; ch = v->skip[ch])
                call = (cok[ch] >> nq) & 1;
            if (all) ok |= (uint16_t)(1u << q);
            if (call) cq |= (uint8_t)(1u << q);
        }
        v->u8ok[i] = ok;
        cok[i] = cq;
        uint16_t md = v->depth[i];
        for (uint32_t ch = i + 1; ch < v->skip[i]; ch = v->skip[ch]) md = v->maxdep[ch] > md ? v->maxdep[ch] : md;
        v->maxdep[i] = md;
        /* characters (bytes that are not UTF-8 continuations) from node i
         * to the end of its subtree's longest token */
        uint32_t hi = 0;
        for (uint32_t ch = i + 1; ch < v->skip[i]; ch = v->skip[ch])
            if (v->maxch[ch] > hi) hi = v->maxch[ch];
        v->maxch[i] = (uint16_t)(hi + ((v->byte[i] & 0xC0) != 0x80));
        for (uint32_t ch = i + 1; ch < v->skip[i]; ch = v->skip[ch])
            for (int w = 0; w < 4; w++) b.w[w] |= v->sub[ch].w[w];
        v->sub[i] = b;
        /* cskip: skip[i] lies past i's subtree; it is i's next sibling when
         * at the same depth (computed already: later in preorder) */
        bool only = mt_json_content_ascii(&b) && ((ok >> MT_U8_START) & 1);
        uint32_t nx = v->skip[i];
        v->cskip[i] = !only ? i : nx < nn && v->depth[nx] == v->depth[i] ? v->cskip[nx] : nx;
    }
    di_status st = build_frontier(v, cok, dec, err);
    free(end_node), free(stack), free(cok), free(dec);
    return st;
}

void di_grammar_vocab_free(di_grammar_vocab *v) {
    if (!v) return;
    free(v->data);
    free(v->off);
    free(v->flags);
    free(v->eos);
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tok_start);
    free(v->trie_tok);
    free(v->sub);
    free(v->u8ok);
    free(v->maxdep);
    free(v->cskip);
    free(v->maxch), free(v->nch), free(v->esc_tail), free(v->content_le);
    free(v->frontier), free(v->gspan), free(v->fnode);
    mt_shared_free(v->shared);
    free(v);
}

di_status di_grammar_vocab_create(uint32_t n_tokens, const uint8_t *const *bytes, const uint32_t *lens,
                                  const uint8_t *flags, di_grammar_vocab **out, di_error *err) {
    *out = NULL;
    if (n_tokens == 0 || n_tokens > VOCAB_MAX_TOKENS)
        return di_error_set(err, DI_ERR_RANGE, "vocabulary size %u out of range (1..%u)", n_tokens, VOCAB_MAX_TOKENS);
    if (!bytes || !lens) return di_error_set(err, DI_ERR_INVALID_ARG, "token arrays are NULL");
    di_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    v->n_tokens = n_tokens;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        if (lens[i] > VOCAB_MAX_TOKEN_BYTES) {
            di_grammar_vocab_free(v);
            return di_error_set(err, DI_ERR_RANGE, "token %u is %u bytes (limit %u)", i, lens[i], VOCAB_MAX_TOKEN_BYTES);
        }
        if (lens[i] && !bytes[i]) {
            di_grammar_vocab_free(v);
            return di_error_set(err, DI_ERR_INVALID_ARG, "token %u has no bytes", i);
        }
        total += lens[i];
    }
    v->data = malloc(total ? (size_t)total : 1);
    v->off = di_malloc_array((size_t)n_tokens + 1, sizeof(uint64_t));
    v->flags = calloc(n_tokens, 1);
    v->eos = di_malloc_array(n_tokens, sizeof(uint32_t));
    if (!v->data || !v->off || !v->flags || !v->eos) {
        di_grammar_vocab_free(v);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    uint64_t o = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        v->off[i] = o;
        if (lens[i]) memcpy(v->data + o, bytes[i], lens[i]);
        o += lens[i];
        uint8_t f = flags ? flags[i] : DI_GRAMMAR_TOKEN_NORMAL;
        if (f > DI_GRAMMAR_TOKEN_NAMED) {
            di_grammar_vocab_free(v);
            return di_error_set(err, DI_ERR_INVALID_ARG, "token %u has unknown flag %u", i, f);
        }
        bool special_byte = lens[i] && memchr(bytes[i], DI_GRAMMAR_SPECIAL_BYTE, lens[i]);
        if (f == DI_GRAMMAR_TOKEN_NAMED) {
            if (lens[i] < 2 || bytes[i][0] != DI_GRAMMAR_SPECIAL_BYTE || memchr(bytes[i] + 1, DI_GRAMMAR_SPECIAL_BYTE, lens[i] - 1)) {
                di_grammar_vocab_free(v);
                return di_error_set(err, DI_ERR_INVALID_ARG, "named special token %u must be 0x%02X + its text", i,
                                    DI_GRAMMAR_SPECIAL_BYTE);
            }
            /* matched by its bytes like any token: only a grammar that
             * spells the special byte reaches it */
            f = DI_GRAMMAR_TOKEN_NORMAL;
        } else if (f == DI_GRAMMAR_TOKEN_NORMAL && special_byte) {
            /* the special byte belongs to named tokens alone */
            f = DI_GRAMMAR_TOKEN_SPECIAL;
        }
        v->flags[i] = f;
        if (f == DI_GRAMMAR_TOKEN_EOS) v->eos[v->n_eos++] = i;
        if (lens[i] > v->max_len) v->max_len = lens[i];
    }
    v->off[n_tokens] = o;
    di_status s = build_trie(v, err);
    if (s) {
        di_grammar_vocab_free(v);
        return s;
    }
    v->shared = mt_shared_create(); /* NULL is fine: no sharing */
    v->share_budget = MT_SHARE_BUDGET;
    *out = v;
    return DI_OK;
}

uint32_t di_grammar_vocab_size(const di_grammar_vocab *v) { return v->n_tokens; }

size_t di_grammar_vocab_mask_words(const di_grammar_vocab *v) { return ((size_t)v->n_tokens + 31) / 32; }

const uint8_t *di_grammar_vocab_token(const di_grammar_vocab *v, uint32_t id, uint32_t *len) {
    if (id >= v->n_tokens) return NULL;
    *len = (uint32_t)(v->off[id + 1] - v->off[id]);
    return v->data + v->off[id];
}

int64_t di_grammar_vocab_greedy_tokenize(const di_grammar_vocab *v, const uint8_t *bytes, size_t n,
                                         uint32_t *ids, size_t cap) {
    size_t pos = 0, count = 0;
    while (pos < n) {
        /* walk the trie from the root along bytes[pos..]; siblings of a
         * node are reached through skip[] */
        uint32_t node = 0, best_tok = UINT32_MAX;
        size_t best_len = 0, depth = 0;
        uint32_t end = v->n_nodes;
        while (pos + depth < n && node < end) {
            uint8_t c = bytes[pos + depth];
            while (node < end && v->byte[node] != c) node = v->skip[node];
            if (node >= end) break;
            if (v->tok_start[node] < v->tok_start[node + 1]) best_tok = v->trie_tok[v->tok_start[node]], best_len = depth + 1;
            end = v->skip[node];
            node++;
            depth++;
        }
        if (best_tok == UINT32_MAX) return -1;
        if (count < cap) ids[count] = best_tok;
        count++;
        pos += best_len;
    }
    return (int64_t)count;
}

/* ---- Hugging Face tokenizer.json (byte-level BPE) ---------------------- */

/* GPT-2's byte-to-unicode table: printable bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order. Returns the inverse as an array
 * indexed by code point (-1 = not a byte). */
static void byte_decoder(int16_t *inv /* (512) */) {
    for (int i = 0; i < 512; i++) inv[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (printable) inv[b] = (int16_t)b;
        else inv[256 + n++] = (int16_t)b;
    }
}

/* Decodes one UTF-8 code point; returns its length or 0 when invalid. */
static int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t v = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

di_status di_grammar_vocab_from_hf_json(const char *path, const char *eos_token, di_grammar_vocab **out,
                                        di_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return di_error_set(err, DI_ERR_FORMAT, "%s: %s (line %d)", path, je.text, je.line);
    di_status st = DI_OK;
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    uint8_t **bytes = NULL;
    uint32_t *lens = NULL;
    uint8_t *flags = NULL;
    uint32_t n = 0;
    if (!json_is_object(vocab)) {
        st = di_error_set(err, DI_ERR_FORMAT, "%s: model.vocab is not an object", path);
        goto done;
    }
    /* Size = largest id + 1 over the vocab and the added tokens. */
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= (json_int_t)VOCAB_MAX_TOKENS) {
            st = di_error_set(err, DI_ERR_FORMAT, "%s: bad id for token '%s'", path, key);
            goto done;
        }
        if ((uint32_t)id + 1 > n) n = (uint32_t)id + 1;
    }
    size_t ai;
    json_array_foreach(added, ai, val) {
        json_int_t id = json_integer_value(json_object_get(val, "id"));
        if (id < 0 || id >= (json_int_t)VOCAB_MAX_TOKENS) {
            st = di_error_set(err, DI_ERR_FORMAT, "%s: bad added token id", path);
            goto done;
        }
        if ((uint32_t)id + 1 > n) n = (uint32_t)id + 1;
    }
    bytes = di_calloc(n, sizeof(uint8_t *));
    lens = di_calloc(n, sizeof(uint32_t));
    flags = di_calloc(n, 1);
    if (!bytes || !lens || !flags) {
        st = di_error_set(err, DI_ERR_NOMEM, "out of memory");
        goto done;
    }
    int16_t inv[512];
    byte_decoder(inv);
    /* added tokens may also sit in model.vocab under their raw text */
    json_array_foreach(added, ai, val) flags[json_integer_value(json_object_get(val, "id"))] = DI_GRAMMAR_TOKEN_SPECIAL;
    json_object_foreach(vocab, key, val) {
        uint32_t id = (uint32_t)json_integer_value(val);
        if (flags[id] != DI_GRAMMAR_TOKEN_NORMAL) continue;
        size_t kl = strlen(key);
        uint8_t *b = malloc(kl + 1);
        if (!b) { st = di_error_set(err, DI_ERR_NOMEM, "out of memory"); goto done; }
        free(bytes[id]);
        bytes[id] = b;
        uint32_t bl = 0;
        for (size_t i = 0; i < kl;) {
            uint32_t cp;
            int l = utf8_decode((const uint8_t *)key + i, kl - i, &cp);
            if (!l || cp >= 512 || inv[cp] < 0) {
                st = di_error_set(err, DI_ERR_FORMAT, "%s: token '%s' is not byte-level BPE", path, key);
                goto done;
            }
            b[bl++] = (uint8_t)inv[cp];
            i += (size_t)l;
        }
        lens[id] = bl;
    }
    /* Added tokens are control tokens here (chat markers, FIM, ...): a
     * grammar never produces them; their text is kept as written. */
    json_array_foreach(added, ai, val) {
        uint32_t id = (uint32_t)json_integer_value(json_object_get(val, "id"));
        const char *content = json_string_value(json_object_get(val, "content"));
        if (!content) continue;
        size_t cl = strlen(content);
        free(bytes[id]);
        bytes[id] = (uint8_t *)di_strdup(content);
        if (!bytes[id]) { st = di_error_set(err, DI_ERR_NOMEM, "out of memory"); goto done; }
        lens[id] = (uint32_t)cl;
        flags[id] = eos_token && !strcmp(content, eos_token) ? DI_GRAMMAR_TOKEN_EOS : DI_GRAMMAR_TOKEN_SPECIAL;
    }
    st = di_grammar_vocab_create(n, (const uint8_t *const *)bytes, lens, flags, out, err);
    if (st) di_error_prefix(err, "%s: ", path);
done:
    if (bytes)
        for (uint32_t i = 0; i < n; i++) free(bytes[i]);
    free(bytes);
    free(lens);
    free(flags);
    json_decref(root);
    return st;
}
