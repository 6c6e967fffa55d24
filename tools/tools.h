/* Subcommands of the deepinfer command. Each returns the process exit status
 * (0 ok, 1 failure, 2 usage error); argv[0] is the subcommand name. */
#ifndef DI_TOOLS_H
#define DI_TOOLS_H

#include "deepinfer.h"

typedef struct di_command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);
} di_command;

int di_cmd_info(int argc, char **argv);
int di_cmd_run(int argc, char **argv);
int di_cmd_chat(int argc, char **argv);
int di_cmd_batch(int argc, char **argv);
int di_cmd_serve(int argc, char **argv);
int di_cmd_route(int argc, char **argv);
int di_cmd_tokenize(int argc, char **argv);
int di_cmd_grammar(int argc, char **argv);
/* deepinfer info on an HF checkpoint folder (cmd_info_hf.c). */
int di_info_hf(const char *dir);
int di_info_hf_v41(const char *dir); /* DeepSeek-V4.1 folders (cmd_info_v41.c) */
int di_cmd_perplexity(int argc, char **argv);
int di_cmd_bench(int argc, char **argv);
int di_cmd_quantize(int argc, char **argv);

#endif
