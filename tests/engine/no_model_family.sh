#!/usr/bin/env bash
# The engine names no model family (issue 29): what differs between
# families lives behind the model's interface (src/model/) and the text
# room's (src/text/: di_tok_chat_encode picks the chat rendering by the
# tokenizer's chat kind). Exit 1 listing each line of src/engine/ that
# names one, comments included.
set -euo pipefail
FAMILIES='deepseek|dsml|llama|gemma|qwen|mistral|mixtral|phi3|smollm'
if hits=$(grep -rniE "$FAMILIES" src/engine/); then
    echo "no_model_family: src/engine/ names a model family:"
    echo "$hits"
    exit 1
fi
