/* OpenAI Responses and Anthropic Messages for DeepSeek checkpoints
 * (routes_protocols.c): request bodies -> the Chat Completions body the
 * one conversation path reads; parsed output -> their answer objects and
 * their streamed events. JSON returned is a new reference; a stream state
 * from srv_proto_stream_new is freed with srv_proto_stream_free. */
#ifndef DI_SERVER_ROUTES_PROTOCOLS_H
#define DI_SERVER_ROUTES_PROTOCOLS_H

#include "server/server_internal.h"
#include "text/dsml.h"

typedef enum srv_proto_kind { SRV_PROTO_NONE = 0, SRV_PROTO_RESPONSES, SRV_PROTO_MESSAGES } srv_proto_kind;

/* NULL with r filled (400) when the body is not a valid request. */
json_t *srv_responses_to_chat(const json_t *root, srv_reply *r);
json_t *srv_messages_to_chat(const json_t *root, di_dsml_version v, srv_reply *r);

/* The whole answer from the parsed message (srv_dsml_out_message) and the
 * Chat Completions finish reason ("stop", "length", "tool_calls"). */
json_t *srv_proto_answer(srv_proto_kind kind, const char *id, const char *model, int64_t created, const json_t *msg,
                         const char *finish, int64_t in_tokens, int64_t out_tokens, int64_t cached);

typedef struct srv_proto_stream srv_proto_stream;
srv_proto_stream *srv_proto_stream_new(srv_proto_kind kind, const char *id, const char *model, int64_t created);
void srv_proto_stream_free(srv_proto_stream *p);
/* The opening events (response.created + in_progress / message_start;
 * Messages' ping follows the first content_block_start, as in the recipe). */
void srv_proto_begin(srv_proto_stream *p, srv_buf *out, int64_t in_tokens);
/* Events for an array of Chat Completions deltas (srv_dsml_out_deltas). */
void srv_proto_deltas(srv_proto_stream *p, srv_buf *out, const json_t *deltas);
/* Closes the open item / block and ends the stream. */
void srv_proto_end(srv_proto_stream *p, srv_buf *out, const char *finish, int64_t in_tokens, int64_t out_tokens,
                   int64_t cached);

#endif
