/* The grammar vocabulary (di_grammar_vocab, vocab.c): the token byte
 * strings of one tokenizer, their byte trie, and the per-tokenizer tables
 * the allowed-token masks read (token_mask*.c). Below the parser and the
 * masks: it knows the grammar's byte sets (ir.h) and the shared cache it
 * owns (shared_cache.h), nothing of a parse. */
#ifndef DI_GRAMMAR_VOCAB_H
#define DI_GRAMMAR_VOCAB_H

#include "grammar/ir.h"
#include "grammar/u8.h"

#include <stdint.h>

typedef struct mt_shared_cache mt_shared_cache; /* shared_cache.h */

/* A node of the content frontier: reached from the trie root through
 * string content only (ASCII mt_json_content, or whole well-formed UTF-8
 * characters), at a character boundary, and itself not content: a quote,
 * backslash or control byte, or the first byte of a character that is
 * ill-formed on some path below. Below a node whose path is content, a
 * state that loops on all string content accepts every token except those
 * under its frontier nodes, and is itself the state in front of each of
 * those (token_mask.c). tok_lo .. tok_hi: the tokens of the node's
 * subtree (trie order). */
typedef struct mt_frontier {
    uint32_t node, skip, tok_lo, tok_hi;
} mt_frontier;

/* What token_mask_length.c's count descend reads of each frontier node, in one
 * row: the characters on the path to it (ch; ch == dep: the path is ASCII),
 * its depth and its byte. */
typedef struct mt_fnode {
    uint16_t ch, dep;
    uint8_t byte;
} mt_fnode;

/* A node's share of the frontier: entries idx .. idx + cnt - 1 lie in its
 * subtree; cnt is UINT32_MAX when the path from the root to the node is
 * not string content ending at a character boundary. */
typedef struct mt_gspan {
    uint32_t idx, cnt;
} mt_gspan;

/* Vocabulary with a byte trie laid out in preorder: node i's subtree is
 * nodes i .. skip[i]-1, its byte is byte[i] at depth depth[i] (0 = first
 * byte), and the tokens whose bytes end exactly at node i are
 * trie_tok[tok_start[i] .. tok_start[i+1]). */
struct di_grammar_vocab {
    uint32_t n_tokens;
    uint8_t *data;   /* concatenated token bytes */
    uint64_t *off;   /* (n_tokens + 1) offsets into data */
    uint8_t *flags;  /* (n_tokens) DI_GRAMMAR_TOKEN_* */
    uint32_t *eos;   /* ids flagged EOS */
    uint32_t n_eos;
    uint32_t n_nodes;
    uint8_t *byte;      /* (n_nodes) */
    uint16_t *depth;    /* (n_nodes) */
    uint32_t *skip;     /* (n_nodes) */
    uint32_t *tok_start; /* (n_nodes + 1) */
    uint32_t *trie_tok; /* normal tokens in trie order */
    gb_bits *sub;       /* (n_nodes) bytes occurring in node i's subtree, i included */
    /* (n_nodes) bit q: every path of node i's subtree, entered with the
     * UTF-8 decoder in state q (MT_U8_*), is a well-formed UTF-8 prefix */
    uint16_t *u8ok;
    uint16_t *maxdep;   /* (n_nodes) deepest depth in node i's subtree */
    mt_frontier *frontier; /* (n_frontier) in preorder */
    uint32_t n_frontier;
    mt_fnode *fnode;    /* (n_frontier) */
    mt_gspan *gspan;    /* (n_nodes) */
    /* (n_nodes) cskip[i]: i when node i's subtree holds a byte that is not
     * JSON string content (mt_json_content, or UTF-8 well formed from a
     * character boundary); else the next sibling of i with such a byte,
     * or the end of i's parent's subtree when none follows. The tokens of
     * nodes i .. cskip[i]-1 are then string content only: a state that
     * loops on all of it accepts them in one run (token_mask.c) */
    uint32_t *cskip;
    /* Per-tokenizer character counts (bytes that are not UTF-8
     * continuations): maxch (n_nodes) from node i's byte to the end of the
     * longest token below it; nch (n_tokens) of each token. */
    uint16_t *maxch, *nch;
    /* ((content_max + 1) * mask words) content_le[r]: the normal tokens of
     * at most r characters whose bytes are JSON string content
     * (mt_json_content, or UTF-8 from a character boundary), for the fast
     * path of string interiors (token_mask.c) */
    uint32_t *content_le;
    /* (n_tokens) esc_tail[t]: t's first byte when it is a one-byte JSON
     * escape character (" \\ / b f n r t) and every later byte of t is ASCII
     * string content (mt_json_content), else 0. Right after a backslash
     * such a token stays in the string it continues whenever that string
     * reads all ASCII content (check_uncertain's shortcut, token_mask.c). */
    uint8_t *esc_tail;
    uint32_t content_max;
    bool content_all;   /* no token is longer than content_max characters */
    uint32_t max_len;   /* longest token in bytes */
    /* Local classifications shared by every matcher on this vocabulary,
     * whatever its grammar (shared_cache.c). Internally locked, so the
     * vocabulary stays shareable across threads; NULL when it could not be
     * allocated (then each matcher classifies on its own). */
    mt_shared_cache *shared;
    /* Work (token_mask.c: trie nodes + 100 per parser step) after which a
     * classification consults the shared cache: cheaper ones are not worth
     * a structural key. MT_SHARE_BUDGET; tests set 1 to share everything. */
    uint64_t share_budget;
};

#define MT_SHARE_BUDGET 2500

/* Longest content token (characters) in the per-tokenizer tables: bounds
 * their memory on hostile vocabularies; longer tokens take the walk. */
#define MT_CONTENT_MAX_CHARS 256

/* ASCII bytes a JSON string holds unescaped. */
static inline bool mt_json_content(uint8_t x) { return x >= 0x20 && x < 0x80 && x != '"' && x != '\\'; }
/* mt_json_content as bits of gb_bits words 0 and 1: 0x20..0x7F but " and \\ */
#define MT_CONTENT_W0 0xFFFFFFFB00000000ull
#define MT_CONTENT_W1 0xFFFFFFFFEFFFFFFFull
/* Whether the ASCII bytes of set b are all mt_json_content. */
static inline bool mt_json_content_ascii(const gb_bits *b) {
    return !((b->w[0] & ~MT_CONTENT_W0) | (b->w[1] & ~MT_CONTENT_W1));
}

#endif
