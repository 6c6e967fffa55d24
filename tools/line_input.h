/* The lines `deepinfer chat` reads: on a terminal with libedit (when the
 * build found it) they can be edited (emacs keys) and earlier ones recalled
 * (up / down arrows, Ctrl-R); otherwise - piped input, or no libedit - plain
 * lines from stdin. The prompt goes to stderr either way. */
#ifndef DI_TOOLS_LINE_INPUT_H
#define DI_TOOLS_LINE_INPUT_H

typedef struct di_line_input di_line_input;

/* Never NULL except out of memory; prog names the libedit settings
 * (~/.editrc sections). */
di_line_input *di_line_input_open(const char *prog);
/* One line without its newline (malloc'd, caller frees); NULL at end of
 * input or when a signal (Ctrl-C) interrupted the read. Non-empty lines
 * join the history. */
char *di_line_input_read(di_line_input *in, const char *prompt);
/* 1 when lines are edited with libedit. */
int di_line_input_edits(const di_line_input *in);
void di_line_input_close(di_line_input *in);

#endif
