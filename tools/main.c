/* deepinfer: one command, several subcommands. Each subcommand lives in its
 * own tools/cmd_<name>.c and is listed here. */
#include "tools.h"

#ifdef DI_HAVE_CUDA_BACKEND
#include "kernels/cuda/backend_cuda.h"
#endif

#include <stdio.h>
#include <string.h>

static const di_command COMMANDS[] = {
    {"run", "generate a reply to one prompt, streamed", di_cmd_run},
    {"chat", "interactive multi-turn chat", di_cmd_chat},
    {"batch", "offline generation for a JSONL file of requests", di_cmd_batch},
    {"serve", "OpenAI-compatible HTTP server", di_cmd_serve},
    {"route", "one OpenAI endpoint over several serve engines (prefix affinity)", di_cmd_route},
    {"info", "show a model's architecture, tensors and validation result", di_cmd_info},
    {"tokenize", "encode text to token ids, or --decode ids to text", di_cmd_tokenize},
    {"grammar", "check or benchmark JSON Schema / regex / EBNF token masks", di_cmd_grammar},
    {"perplexity", "teacher-forced perplexity of a text, llama-perplexity style", di_cmd_perplexity},
    {"quantize", "rewrite a GGUF model with its matrices in another type", di_cmd_quantize},
    {"bench", "tokens/s (llama-bench style); bench serve / plot: load-test an OpenAI server", di_cmd_bench},
};

static void usage(FILE *f) {
    fprintf(f, "usage: deepinfer <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\nrun 'deepinfer <command> --help' for a command's options\n");
}

int main(int argc, char **argv) {
#ifdef DI_HAVE_CUDA_BACKEND
    di_backend_cuda_register(); /* --device cuda[:N] (docs/CUDA.md) */
#endif
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("deepinfer %s\n", DI_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "deepinfer: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
