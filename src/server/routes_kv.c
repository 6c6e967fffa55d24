/* Prefill -> decode KV transfer over HTTP (serve --role):
 *
 *   POST /v1/kv/export   (prefill role) body: a chat ("messages") or
 *                        completions ("prompt") request, as for generation.
 *                        Answer: application/octet-stream, the KV records of
 *                        the prompt's cached full blocks (di_engine_export_kv),
 *                        in prefix order. Run the request first
 *                        (max_tokens 1 is enough) so its blocks are cached.
 *   POST /v1/kv/import   (decode role) body: those bytes. Every record is
 *                        checked (checksum, model file hash and KV flavor,
 *                        geometry, token range) before its block is cached.
 *                        Answer: {"imported": n, "present": k}; 400 on a bad
 *                        record (the ones before it stay).
 *
 * The decode engine then takes the prompt as a prefix hit: it recomputes
 * only the last partial block (and the last token) and continues exactly as
 * one engine would (batch-invariant kernels). */
#include "server/server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_route_kv_export(di_server *s, const srv_http_req *q, srv_reply *r) {
    if (!s->kv_export) {
        srv_reply_error(r, 404, "invalid_request_error", NULL, "wrong_role",
                        "This server has the decode role: it imports KV, it does not export it.");
        return;
    }
    int32_t *ids;
    size_t n;
    if (!srv_request_prompt(s, q, &ids, &n, r)) return;
    uint8_t *buf = NULL;
    size_t len = 0;
    int32_t n_blocks = 0;
    di_error err;
    di_status st = di_engine_export_kv(s->engine, ids, n, &buf, &len, &n_blocks, &err);
    free(ids);
    if (st) {
        srv_reply_error(r, st == DI_ERR_NOMEM ? 503 : 500, "server_error", NULL, NULL, "KV export failed: %s", err.msg);
        return;
    }
    r->status = 200;
    r->text = len ? (char *)buf : calloc(1, 1);
    if (!len) free(buf);
    r->text_len = len;
    r->content_type = "application/octet-stream";
}

void srv_route_kv_import(di_server *s, const srv_http_req *q, srv_reply *r) {
    if (!s->kv_import) {
        srv_reply_error(r, 404, "invalid_request_error", NULL, "wrong_role",
                        "This server has the prefill role: it exports KV, it does not import it.");
        return;
    }
    int32_t imported = 0, present = 0;
    di_error err;
    di_status st = di_engine_import_kv(s->engine, (const uint8_t *)q->body, q->body_len, &imported, &present, &err);
    if (st) {
        unsigned code = st == DI_ERR_FULL ? 503 : st == DI_ERR_NOMEM ? 503 : 400;
        srv_reply_error(r, code, code == 400 ? "invalid_request_error" : "server_error", NULL, "bad_kv_record",
                        "KV import refused after %d records: %s", (int)(imported + present), err.msg);
        return;
    }
    r->status = 200;
    r->json = json_pack("{s:i, s:i}", "imported", (int)imported, "present", (int)present);
}
