/* chat's "/image FILE": images wait for the next user message, then stay
 * with it in the history (every turn resubmits the conversation, its
 * images included; the engine's encoded-image cache keeps the tower from
 * running again for them). */
#ifndef DI_TOOLS_CHAT_IMAGES_H
#define DI_TOOLS_CHAT_IMAGES_H

#include "deepinfer.h"

#include <stddef.h>

#define DI_CHAT_MAX_IMAGES 16 /* per request, the engine's cap: the whole conversation */

typedef struct di_chat_images {
    di_image_input in[DI_CHAT_MAX_IMAGES]; /* owned bytes */
    size_t n;
} di_chat_images;

/* Reads FILE (arg: the rest of the "/image" line, spaces trimmed), checks
 * that the engine's model takes images, that the conversation stays within
 * DI_CHAT_MAX_IMAGES (n_in_history already sent) and that the file decodes,
 * and appends it to *pend. 0 on success (msg: what was attached), else 1
 * with the reason in msg. */
int di_chat_image_attach(di_engine *e, const char *arg, size_t n_in_history, di_chat_images *pend, char *msg,
                         size_t msg_size);
/* A user message's content: one placeholder per image, then text (malloc;
 * NULL when out of memory). */
char *di_chat_image_content(di_engine *e, size_t n_images, const char *text);
void di_chat_images_free(di_chat_images *c);

#endif
