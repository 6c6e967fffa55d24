/* The engine's tokenizer, for in-tree front ends that render prompts with
 * the text module themselves (the server's chat paths in src/server/).
 * Borrowed; lives as long as the engine. Not part of the public API in
 * include/deepinfer.h. */
#ifndef DI_ENGINE_ENGINE_TEXT_H
#define DI_ENGINE_ENGINE_TEXT_H

#include "deepinfer.h"
#include "text/tokenizer.h"

const di_tokenizer *di_engine_tokenizer(const di_engine *e);

#endif
