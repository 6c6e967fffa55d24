/* A minimal HTTP/1.1 client for the router's calls to its engines: one
 * request per connection ("Connection: close"), a body of known length,
 * and a response read as status + headers, then its body (Content-Length,
 * chunked or until close) de-chunked as it arrives, so a token stream can be
 * passed on as it comes. Engines are hostile too: every length is bounded.
 *
 * Ownership: di_up_open allocates, di_up_close releases (and closes). */
#ifndef DI_ROUTER_UPSTREAM_H
#define DI_ROUTER_UPSTREAM_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct di_up di_up;

/* Connects to host:port, sends method path with body (may be NULL) and the
 * extra header lines (each ending "\r\n", may be NULL), and reads the
 * response head. DI_ERR_IO when the engine cannot be reached or closes
 * before a complete head (a dead engine); timeout_ms bounds connect and
 * each read. */
di_status di_up_open(const char *host, int port, const char *method, const char *path, const char *body,
                     size_t body_len, const char *headers, int timeout_ms, di_up **out, di_error *err);
void di_up_close(di_up *u);

int di_up_status(const di_up *u);
/* The Content-Type of the response ("" when none). */
const char *di_up_content_type(const di_up *u);

/* Reads up to cap body bytes into buf: > 0 bytes, 0 at the end of the body,
 * -1 when the engine failed mid-body (connection lost, bad chunking). */
ssize_t di_up_read(di_up *u, char *buf, size_t cap);

#endif
