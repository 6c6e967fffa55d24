#include "chat_images.h"

#include "vision/image.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int di_chat_image_attach(di_engine *e, const char *arg, size_t n_in_history, di_chat_images *pend, char *msg,
                         size_t msg_size) {
    while (*arg && isspace((unsigned char)*arg)) arg++;
    size_t len = strlen(arg);
    while (len && isspace((unsigned char)arg[len - 1])) len--;
    if (!len) {
        snprintf(msg, msg_size, "usage: /image FILE (attaches the image to your next message)");
        return 1;
    }
    char *path = malloc(len + 1);
    if (!path) {
        snprintf(msg, msg_size, "out of memory");
        return 1;
    }
    memcpy(path, arg, len);
    path[len] = 0;
    int rc = 1;
    uint8_t *buf = NULL;
    FILE *f = NULL;
    di_image_limits lim;
    di_image_limits_default(&lim);
    if (!di_engine_image_placeholder(e)) {
        snprintf(msg, msg_size, "/image %s: this model takes no images (no vision tower)", path);
    } else if (n_in_history + pend->n >= DI_CHAT_MAX_IMAGES) {
        snprintf(msg, msg_size, "/image %s: the conversation already has %d images, the most one request takes",
                 path, DI_CHAT_MAX_IMAGES);
    } else if (!(f = fopen(path, "rb"))) {
        snprintf(msg, msg_size, "/image %s: cannot open: %s", path, strerror(errno));
    } else if (!(buf = malloc((size_t)lim.max_bytes + 1))) {
        snprintf(msg, msg_size, "/image %s: out of memory", path);
    } else {
        size_t got = fread(buf, 1, (size_t)lim.max_bytes + 1, f);
        di_image img = {0};
        di_error err;
        if (got == 0) {
            snprintf(msg, msg_size, "/image %s: empty or unreadable", path);
        } else if (got > lim.max_bytes) {
            snprintf(msg, msg_size, "/image %s: over the %llu-byte limit", path, (unsigned long long)lim.max_bytes);
        } else if (di_image_decode(buf, got, &lim, &img, &err)) {
            snprintf(msg, msg_size, "/image %s: %s", path, err.msg);
        } else {
            snprintf(msg, msg_size, "[image %s (%s, %dx%d) attached to your next message]", path,
                     di_image_format_name(di_image_sniff(buf, got)), (int)img.width, (int)img.height);
            di_image_free(&img);
            pend->in[pend->n++] = (di_image_input){buf, got};
            buf = NULL;
            rc = 0;
        }
    }
    if (f) fclose(f);
    free(buf);
    free(path);
    return rc;
}

char *di_chat_image_content(di_engine *e, size_t n_images, const char *text) {
    const char *ph = n_images ? di_engine_image_placeholder(e) : "";
    size_t lp = ph ? strlen(ph) : 0, lt = strlen(text);
    char *p = malloc(n_images * lp + lt + 1);
    if (!p) return NULL;
    for (size_t i = 0; i < n_images; i++) memcpy(p + i * lp, ph, lp);
    memcpy(p + n_images * lp, text, lt + 1);
    return p;
}

void di_chat_images_free(di_chat_images *c) {
    for (size_t i = 0; i < c->n; i++) free((void *)c->in[i].data);
    c->n = 0;
}
