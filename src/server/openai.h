/* The OpenAI routes' own header, private to the four files that implement
 * them (srv_route_chat, _completions, _responses, _messages, _tokenize,
 * _detokenize, srv_request_prompt):
 *
 *   routes_openai.c    the routes: generate() (parse, check, admit, submit,
 *                      stream or wait), /v1/models, /tokenize, /detokenize
 *   openai_request.c   body and field readers, sampling and output fields
 *                      (parse_gen), the context check
 *   openai_prompt.c    prompts: chat messages (template, Llama 3.1 tools,
 *                      <think> models, DeepSeek conversations through
 *                      dsml_chat.c), completion prompts, token ids, images
 *   openai_response.c  OpenAI's answer and chunk shapes, logprobs, usage,
 *                      the SSE producer (Responses / Messages through
 *                      routes_protocols.c)
 *
 * Functions that fail fill the reply (an OpenAI error object) and return
 * false. */
#ifndef DI_SERVER_OPENAI_H
#define DI_SERVER_OPENAI_H

#include "server/server_internal.h"
#include "server/dsml_chat.h"
#include "server/routes_protocols.h"

#include "vision/image.h"

#define MAX_STOPS 16 /* stop strings in one body: OpenAI allows 4; vLLM more */

typedef enum req_kind { KIND_CHAT, KIND_COMPLETION } req_kind;

/* A parsed generation request; json strings are borrowed from the body. */
typedef struct gen_req {
    req_kind kind;
    int32_t **prompts;         /* (n_prompts) token ids, owned */
    size_t *prompt_lens;       /* (n_prompts) */
    size_t n_prompts;
    int32_t max_tokens;        /* 0 = the server's default */
    int32_t n;
    di_sampling_params sp;
    bool seed_given;
    uint64_t seed;
    const char *stops[MAX_STOPS];
    size_t n_stops;
    di_logit_bias *bias;       /* (n_bias), owned */
    size_t n_bias;
    bool stream, include_usage, ignore_eos;
    bool logprobs;
    int32_t top_logprobs;
    di_constraint constraint;  /* from response_format */
    char *constraint_text;     /* owned JSON Schema text */
    di_image_input images[DI_IMAGE_DEFAULT_MAX_IMAGES]; /* image_url parts, data owned */
    size_t n_images;
    bool dsml;                 /* a DeepSeek conversation (dsml_chat.c) */
    srv_proto_kind proto;      /* Responses / Messages body (routes_protocols.c) */
    srv_dsml_opts dsml_opts;
} gen_req;

/* Per-job formatting state, freed with the job. */
typedef struct route_state {
    req_kind kind;
    char id[48];
    int64_t created;
    const char *model;         /* the server's name (outlives jobs) */
    di_engine *engine;
    bool include_usage, logprobs;
    int32_t top_logprobs;
    int32_t n;                 /* choices per prompt */
    size_t n_choices;
    int64_t prompt_tokens;     /* usage: each distinct prompt once */
    int64_t image_prompt_len;  /* chat with images: the prompt before expansion, else -1 */
    int64_t completion_tokens, cached_tokens;
    size_t n_final;
    bool *sent_role;           /* (n_choices) chat stream: role chunk sent */
    srv_dsml_out **dsml;       /* (n_choices) DeepSeek output parsers, or NULL */
    srv_proto_kind proto;      /* Responses / Messages shapes (one choice) */
    srv_proto_stream *ps;      /* their stream state */
    bool proto_begun;
    size_t *text_offset;       /* (n_choices) completions logprobs text_offset */
    bool failed;               /* a choice ended in error */
    bool cancelled;            /* a choice was cancelled (shutdown) */
    char error[256];
} route_state;

/* ---- openai_request.c --------------------------------------------------------- */

/* 400 invalid_type: "'name' must be <want>." */
void oai_bad_type(srv_reply *r, const char *name, const char *want);
/* o[name] when present and not null, else *out unchanged. */
bool oai_get_bool(json_t *o, const char *name, bool *out, srv_reply *r);
/* The body as a JSON object (a new reference), or NULL with r filled. */
json_t *oai_parse_body(const srv_http_req *q, srv_reply *r);
/* "model", when given, must name the served model (404 otherwise). */
bool oai_check_model(di_server *s, json_t *root, srv_reply *r);
/* Every field of a chat or completions body into *g (zeroed by the caller;
 * freed with oai_gen_req_free whatever this returns), prompts included. */
bool oai_parse_gen(di_server *s, json_t *root, req_kind kind, gen_req *g, srv_reply *r);
/* OpenAI's context_length_exceeded answer, with the counts. */
bool oai_check_context(di_server *s, const gen_req *g, srv_reply *r);
void oai_gen_req_free(gen_req *g);

/* ---- openai_prompt.c ---------------------------------------------------------- */

/* text -> *ids (malloc'd, *n of them); a 400 when it cannot be tokenized. */
bool oai_tokenize_text(di_server *s, const char *text, bool add_special, int32_t **ids, size_t *n, srv_reply *r);
/* "messages" -> g's one prompt (and its images, constraint, output parser options). */
bool oai_chat_prompt(di_server *s, json_t *root, gen_req *g, srv_reply *r);
/* "prompt" (OpenAI's four forms) -> g's prompts. */
bool oai_completion_prompts(di_server *s, json_t *root, gen_req *g, srv_reply *r);
/* A token-id array (each id in the vocabulary) -> *ids (malloc'd). */
bool oai_token_prompt(di_server *s, json_t *arr, int32_t **ids, size_t *n, srv_reply *r);

/* ---- openai_response.c -------------------------------------------------------- */

/* A job's route state (srv_job.route_free). */
void oai_route_state_free(void *p);
/* The job's next SSE bytes (srv_sse_fn); true when the stream is over. */
bool oai_sse_produce(srv_job *j, srv_buf *out);
/* The whole answer, once every choice is done. */
void oai_build_response(srv_job *j, srv_reply *r);

#endif
