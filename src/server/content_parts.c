/* Content parts joined into one text (content_parts.h). */
#include "server/content_parts.h"

#include <string.h>

bool srv_content_parts_join(const json_t *parts, const char *param, const srv_parts_rules *rules, srv_buf *out,
                            srv_reply *r) {
    size_t k;
    json_t *part;
    json_array_foreach(parts, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            srv_buf_free(out);
            srv_reply_error(r, 400, "invalid_request_error", param, "invalid_type", "'%s'%s", param,
                            rules->shape_tail);
            return false;
        }
        const char *piece;
        size_t piece_len;
        if (rules->image && !strcmp(json_string_value(type), "image_url")) {
            if (!rules->image(rules->ctx, part, param, &piece, &piece_len, r)) {
                srv_buf_free(out);
                return false;
            }
        } else if (strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            srv_buf_free(out);
            srv_reply_error(r, 400, "invalid_request_error", param, "unsupported_content",
                            "Content parts of type '%.40s' are not supported %s.", json_string_value(type),
                            rules->only);
            return false;
        } else {
            piece = json_string_value(text);
            piece_len = json_string_length(text);
        }
        if ((k && !srv_buf_append(out, rules->sep, strlen(rules->sep))) || !srv_buf_append(out, piece, piece_len)) {
            srv_buf_free(out);
            srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
            return false;
        }
    }
    return true;
}
