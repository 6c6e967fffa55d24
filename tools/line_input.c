/* See line_input.h. libedit is used through its own API (histedit.h): it
 * installs no signal handlers of its own (EL_SIGNAL stays off), so the
 * chat's SIGINT handler interrupts el_gets' read and Ctrl-C at the prompt
 * behaves as with plain input; el_gets restores the terminal mode before it
 * returns. */
#include "line_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef DI_HAVE_LIBEDIT
#include <histedit.h>
#endif

/* Lines kept for recall. */
#define HISTORY_LINES 1000

struct di_line_input {
#ifdef DI_HAVE_LIBEDIT
    EditLine *el;
    History *hist;
#endif
    const char *prompt;
};

#ifdef DI_HAVE_LIBEDIT
static char *prompt_fn(EditLine *el) {
    di_line_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return (char *)(in && in->prompt ? in->prompt : "");
}
#endif

di_line_input *di_line_input_open(const char *prog) {
    di_line_input *in = calloc(1, sizeof *in);
    if (!in) return NULL;
#ifdef DI_HAVE_LIBEDIT
    if (isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
        in->el = el_init(prog, stdin, stderr, stderr);
        in->hist = history_init();
        if (in->el && in->hist) {
            HistEvent ev;
            history(in->hist, &ev, H_SETSIZE, HISTORY_LINES);
            history(in->hist, &ev, H_SETUNIQUE, 1);
            el_set(in->el, EL_CLIENTDATA, in);
            el_set(in->el, EL_PROMPT, prompt_fn);
            el_set(in->el, EL_EDITOR, "emacs");
            el_set(in->el, EL_HIST, history, in->hist);
            el_set(in->el, EL_BIND, "^R", "em-inc-search-prev", NULL);
            el_source(in->el, NULL); /* the user's ~/.editrc, if any */
        } else {
            if (in->el) el_end(in->el);
            if (in->hist) history_end(in->hist);
            in->el = NULL;
            in->hist = NULL;
        }
    }
#else
    (void)prog;
#endif
    return in;
}

int di_line_input_edits(const di_line_input *in) {
#ifdef DI_HAVE_LIBEDIT
    return in->el != NULL;
#else
    (void)in;
    return 0;
#endif
}

static char *strip_newline(char *line, size_t n) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    return line;
}

char *di_line_input_read(di_line_input *in, const char *prompt) {
    in->prompt = prompt;
#ifdef DI_HAVE_LIBEDIT
    if (in->el) {
        int count = 0;
        const char *got = el_gets(in->el, &count);
        if (!got || count <= 0) return NULL;
        char *line = strdup(got);
        if (!line) return NULL;
        strip_newline(line, strlen(line));
        if (line[0]) {
            HistEvent ev;
            history(in->hist, &ev, H_ENTER, line);
        }
        return line;
    }
#endif
    fputs(prompt, stderr);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    return strip_newline(line, (size_t)n);
}

void di_line_input_close(di_line_input *in) {
    if (!in) return;
#ifdef DI_HAVE_LIBEDIT
    if (in->el) el_end(in->el);
    if (in->hist) history_end(in->hist);
#endif
    free(in);
}
