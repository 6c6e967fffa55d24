/* Internals shared by the src/text files: the tokenizer struct, the string and
 * pair hash maps, the pre-tokenizer / normalizer step tables and small UTF-8
 * helpers. Nothing here is part of the public contract (tokenizer.h). */
#ifndef DI_TEXT_TOK_INTERNAL_H
#define DI_TEXT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/tokenizer.h"

#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest token text we accept from a file: longer ones are format errors. */
#define TOK_MAX_TOKEN_BYTES 65536u
/* Most tokens a vocabulary may have (ids are int32). */
#define TOK_MAX_VOCAB (1u << 24)

/* ---- growable byte / id buffers ---------------------------------------- */

typedef struct tok_buf {
    char *data;
    size_t len, cap;
} tok_buf;

bool tok_buf_reserve(tok_buf *b, size_t extra);
bool tok_buf_append(tok_buf *b, const void *p, size_t n);
void tok_buf_free(tok_buf *b);
bool tok_ids_push(di_tok_ids *ids, int32_t id);

/* ---- UTF-8 ------------------------------------------------------------- */

/* Length of the UTF-8 sequence starting with lead byte c (1 for invalid). */
static inline size_t tok_utf8_len(uint8_t c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}
/* true when s[0..n) is valid UTF-8 (no surrogates, no overlongs). */
bool tok_utf8_valid(const uint8_t *s, size_t n);
/* Decodes one code point at s (n bytes available); returns its length, 0 if
 * invalid or incomplete. */
size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Encodes cp into out (>= 4 bytes); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);

/* GPT-2 byte <-> unicode mapping used by byte-level BPE vocabularies. */
uint32_t tok_byte_to_cp(uint8_t b);
/* Byte for code point cp, or -1 when cp is not in the mapping. */
int tok_cp_to_byte(uint32_t cp);
/* Decodes byte-level text s into raw bytes appended to out; false (out
 * unchanged in length) when some character is not in the mapping. */
bool tok_bytelevel_decode(const char *s, size_t n, tok_buf *out);
/* Encodes raw bytes into their byte-level form. */
bool tok_bytelevel_encode(const char *s, size_t n, tok_buf *out);

/* ---- hash maps ----------------------------------------------------------- */

uint64_t tok_hash(const void *p, size_t n);

/* String -> id over the tokenizer's key table (keys are not copied). */
typedef struct tok_str_map {
    int32_t *slots; /* (mask+1) ids, -1 = empty */
    uint32_t *hashes;
    uint32_t mask;
} tok_str_map;

/* (left id, right id) -> (rank, merged id). */
typedef struct tok_pair_map {
    uint64_t *keys;  /* (mask+1) left<<32|right, UINT64_MAX = empty */
    int32_t *rank;
    int32_t *merged;
    uint32_t mask;
    uint32_t n;
} tok_pair_map;

bool tok_pair_map_init(tok_pair_map *m, size_t n_expected);
void tok_pair_map_free(tok_pair_map *m);
/* Keeps the first (lowest-rank) entry for a pair. */
bool tok_pair_map_put(tok_pair_map *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
static inline bool tok_pair_map_get(const tok_pair_map *m, int32_t left, int32_t right,
                                    int32_t *rank, int32_t *merged) {
    if (!m->keys) return false;
    uint64_t k = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = k * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return true;
        }
        if (m->keys[i] == UINT64_MAX) return false;
    }
}

/* ---- pre-tokenizer and normalizer steps -------------------------------- */

typedef enum tok_split_behavior {
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_pre_kind {
    TOK_PRE_SPLIT,           /* regex (or literal) split */
    TOK_PRE_BYTELEVEL,       /* optional prefix space + GPT-2 regex; bytes stay raw */
    TOK_PRE_DIGITS,          /* isolate digits (each, or runs) */
    TOK_PRE_METASPACE,       /* ' ' -> ▁, optional prepend, optional split */
    TOK_PRE_WHITESPACE,      /* \w+|[^\w\s]+ */
    TOK_PRE_WHITESPACE_SPLIT,/* split on whitespace, remove it */
    TOK_PRE_PUNCTUATION,     /* isolate punctuation characters */
} tok_pre_kind;

typedef enum tok_prepend_scheme { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend_scheme;

typedef struct tok_pre_step {
    tok_pre_kind kind;
    pcre2_code *re;             /* SPLIT (regex or escaped literal), BYTELEVEL (when use_regex) */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space;      /* BYTELEVEL */
    bool individual_digits;     /* DIGITS */
    char replacement[8];        /* METASPACE: UTF-8 of the replacement char */
    size_t replacement_len;
    tok_prepend_scheme prepend; /* METASPACE */
    bool split;                 /* METASPACE */
} tok_pre_step;

typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_REPLACE,   /* literal pattern (re == NULL) or regex */
    TOK_NORM_PREPEND,
    TOK_NORM_STRIP,
    TOK_NORM_BERT,          /* BertNormalizer: the four bert_* flags */
    TOK_NORM_STRIP_ACCENTS, /* drop combining marks (Mn, Mc, Me) */
    TOK_NORM_PRECOMPILED,   /* SentencePiece charsmap; content = the decoded blob */
} tok_norm_kind;

typedef struct tok_norm_step {
    tok_norm_kind kind;
    pcre2_code *re;
    char *pattern;  /* owned: literal pattern (REPLACE) */
    size_t pattern_len;
    char *content;  /* owned: replacement (REPLACE) or prefix (PREPEND) */
    size_t content_len;
    bool strip_left, strip_right;
    /* BERT: drop controls and map whitespace to ' '; pad CJK ideographs
     * with spaces; NFD + drop Mn; lowercase. */
    bool bert_clean, bert_chinese, bert_strip_accents, bert_lowercase;
} tok_norm_step;

/* ---- the tokenizer ------------------------------------------------------- */

typedef enum tok_model {
    TOK_MODEL_BPE, /* merges by rank (byte-level or over characters) */
    TOK_MODEL_SPM, /* SentencePiece BPE: merges by token score (GGUF "llama") */
    TOK_MODEL_WORDPIECE, /* greedy longest match, "##" continuations (BERT) */
    TOK_MODEL_UNIGRAM,   /* best-scoring segmentation (SentencePiece unigram, T5) */
} tok_model;

enum {
    TOK_ATTR_LSTRIP = 1,  /* added token swallows whitespace on its left */
    TOK_ATTR_RSTRIP = 2,  /* ... and on its right */
    TOK_ATTR_MATCH = 4,   /* matched as a whole in input text (added token) */
    TOK_ATTR_SPECIAL = 8, /* matched only with parse_special; decoded only with render_special */
};

typedef struct tok_entry {
    uint32_t text_off, text_len;   /* stored text, as in the file */
    uint32_t key_off, key_len;     /* model key: raw bytes for byte-level BPE, else == text */
    uint32_t piece_off, piece_len; /* decoded bytes */
    float score;
    uint8_t type;                  /* di_tok_type */
    uint8_t attr;                  /* TOK_ATTR_* */
} tok_entry;

struct di_tokenizer {
    tok_model model;
    bool byte_level;        /* BPE over raw bytes (GPT-2 mapping) */
    bool byte_fallback;     /* unknown characters -> <0xNN> tokens */
    bool ignore_merges;     /* a pre-token that is a whole token is emitted as is */
    bool spm_prefix_space;  /* SPM: add ' ' in front of each text fragment */
    bool strip_first_space; /* decode: drop one leading space of the first piece */
    int32_t n_vocab;
    tok_entry *tokens;      /* (n_vocab) */
    tok_buf strings;        /* all texts / keys / pieces */
    tok_str_map keys;       /* key -> id */
    tok_pair_map merges;
    int32_t byte_ids[256];  /* token of each single byte (byte-level) or <0xNN> (fallback); -1 */
    int32_t unk;
    /* added tokens, grouped by first byte; within a group longest first */
    int32_t *added;         /* (n_added) ids */
    uint32_t n_added;
    uint32_t added_start[257];
    int32_t bos, eos, eot, eom;
    bool add_bos, add_eos;
    uint8_t *eog;           /* (n_vocab) 1 = ends generation */
    tok_pre_step *pre;      /* (n_pre) */
    size_t n_pre;
    tok_norm_step *norm;    /* (n_norm) */
    size_t n_norm;
    /* WordPiece */
    char wp_prefix[16];     /* continuing_subword_prefix, e.g. "##" */
    size_t wp_prefix_len;
    int32_t wp_max_chars;   /* longer words are one unk */
    /* Unigram: scores in double, as HF sums them */
    double *uni_score;      /* (n_vocab), owned */
    double uni_unk_score;   /* lowest score - 10 (HF's unknown-piece penalty) */
    uint32_t uni_max_bytes; /* longest token key */
    char *chat_template;    /* owned, or NULL */
    di_chat_kind chat_kind;
    char describe[96];
};

static inline const char *tok_key(const di_tokenizer *t, int32_t id, size_t *len) {
    *len = t->tokens[id].key_len;
    return t->strings.data + t->tokens[id].key_off;
}

/* ---- shared between files ------------------------------------------------ */

/* Allocates an empty tokenizer with n_vocab zeroed entries. */
di_status tok_alloc(int32_t n_vocab, di_tokenizer **out, di_error *err);
/* Stores text for id: text as given; key (byte-level: decoded raw bytes when
 * decodable); piece. Called once per id in id order by the loaders. */
di_status tok_set_token(di_tokenizer *t, int32_t id, const char *text, size_t len,
                        di_tok_type type, float score, di_error *err);
/* After all tokens (and attrs) are set: builds the key map, byte table,
 * added-token groups, EOG table and description. */
di_status tok_finish(di_tokenizer *t, const char *pre_name, di_error *err);
/* Adds a merge "left right" given as the two vocab-form halves. Unknown
 * halves or results are skipped (as llama.cpp does). */
di_status tok_add_merge(di_tokenizer *t, const char *left, size_t left_len, const char *right,
                        size_t right_len, int32_t rank, di_error *err);
/* Finds a token by its model key. */
int32_t tok_find_key(const di_tokenizer *t, const char *key, size_t len);

/* Pre-tokenizer compile helpers (pretokenize.c). */
di_status tok_compile_regex(const char *pattern, size_t len, pcre2_code **out, di_error *err);
/* Sets t->pre to the regex steps of a GGUF tokenizer.ggml.pre name. */
di_status tok_pre_from_gguf_name(di_tokenizer *t, const char *name, di_error *err);
void tok_pre_free(tok_pre_step *steps, size_t n);
void tok_norm_free(tok_norm_step *steps, size_t n);

/* A list of pieces over one byte buffer, the pre-tokenizer's working set. */
typedef struct tok_span {
    uint32_t off, len;
} tok_span;

typedef struct tok_pieces {
    const char *base; /* text the spans index: own.data or another buffer */
    tok_buf own;
    tok_span *spans;
    size_t n, cap;
} tok_pieces;

bool tok_pieces_push(tok_pieces *p, size_t off, size_t len);
void tok_pieces_free(tok_pieces *p);

/* Per-call scratch (so that a tokenizer is shareable between threads). */
typedef struct tok_scratch {
    tok_pieces a, b;          /* pre-tokenizer ping-pong */
    tok_buf norm;             /* normalized text */
    tok_buf word;             /* SPM working text */
    pcre2_match_data *md;
    pcre2_jit_stack *jit;
    pcre2_match_context *mctx;
    /* BPE / SPM merge state */
    int32_t *sym_id;
    uint32_t *sym_off, *sym_len;
    int32_t *prev, *next;
    size_t sym_cap;
    void *heap;
    size_t heap_n, heap_cap;
} tok_scratch;

void tok_scratch_free(tok_scratch *s);
/* Grows the symbol arrays to hold n symbols. */
bool tok_scratch_symbols(tok_scratch *s, size_t n);
/* bpe.c and spm.c share s->heap; both candidate structs are this size. */
#define TOK_HEAP_ELEM_BYTES 16

/* Binary min-heap over s->heap of TOK_HEAP_ELEM_BYTES elements, ordered by
 * less (tok_heap.c). Push fails only when out of memory; pop needs heap_n > 0. */
typedef bool (*tok_heap_less_fn)(const void *a, const void *b);
bool tok_heap_push(tok_scratch *s, const void *elem, tok_heap_less_fn less);
void tok_heap_pop(tok_scratch *s, void *top, tok_heap_less_fn less);

/* Precompiled charsmaps (precompiled.c): base64 text -> a checked blob
 * (malloc'd, caller frees); the blob applied to in, appended to out. */
di_status tok_precompiled_load(const char *b64, size_t n, char **blob, size_t *blob_len, di_error *err);
di_status tok_precompiled_apply(const char *blob, size_t blob_len, const char *in, size_t n, tok_buf *out,
                                di_error *err);

/* Runs normalizers on text into s->norm. */
di_status tok_normalize(const di_tokenizer *t, const char *text, size_t len, tok_scratch *s,
                        di_error *err);
/* Runs the pre-tokenizer steps; result in *out (points to s->a or s->b). */
di_status tok_pretokenize(const di_tokenizer *t, const char *text, size_t len, bool first_segment,
                          tok_scratch *s, tok_pieces **out, di_error *err);

/* Models. */
di_status tok_bpe_word(const di_tokenizer *t, const char *w, size_t n, tok_scratch *s,
                       di_tok_ids *out, di_error *err);
/* WordPiece over one pre-token (greedy longest match; a word with an
 * unmatchable rest, or longer than wp_max_chars, is one unk). */
di_status tok_wordpiece_word(const di_tokenizer *t, const char *w, size_t n, tok_scratch *s,
                             di_tok_ids *out, di_error *err);
/* Unigram over one pre-token: the best-scoring segmentation (Viterbi),
 * runs of unknown characters fused into one unk. */
di_status tok_unigram_word(const di_tokenizer *t, const char *w, size_t n, tok_scratch *s,
                           di_tok_ids *out, di_error *err);
/* SentencePiece BPE over text fragment w: ' ' becomes ▁, and with
 * add_prefix one ▁ goes in front. */
di_status tok_spm_text(const di_tokenizer *t, const char *w, size_t n, bool add_prefix,
                       tok_scratch *s, di_tok_ids *out, di_error *err);

#endif
