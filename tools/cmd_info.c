/* deepinfer info MODEL: placeholder until the readers land. */
#include "tools.h"

#include <stdio.h>

int di_cmd_info(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: deepinfer info MODEL\n");
        return 2;
    }
    fprintf(stderr, "deepinfer info: not implemented yet\n");
    return 1;
}
