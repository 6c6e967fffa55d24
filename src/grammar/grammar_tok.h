/* Bridge from the text module's tokenizer to the grammar vocabulary. Kept
 * out of grammar.h so the grammar core does not depend on the tokenizer. */
#ifndef DI_GRAMMAR_GRAMMAR_TOK_H
#define DI_GRAMMAR_GRAMMAR_TOK_H

#include "grammar/grammar.h"
#include "text/tokenizer.h"

/* The token byte strings (pieces) of t. End-of-generation ids (EOS, EOT,
 * <|im_end|>, ...) become EOS tokens (allowed when the grammar accepts);
 * control, user-defined, unknown and unused tokens are NAMED tokens
 * (DI_GRAMMAR_SPECIAL_BYTE + their text: allowed only where a grammar names
 * them, as tool-call grammars do); normal and byte-fallback tokens carry
 * their bytes. */
di_status di_grammar_vocab_from_tokenizer(const di_tokenizer *t, di_grammar_vocab **out, di_error *err);

#endif
