/* constraint.h: output constraints for a loaded model, compiled once and shared (serve, and
 * generate/bench): response_format's json_object or json_schema becomes an fl_cons
 * (engine/cdecode.h) over the model's tokens. The cache is safe to use from several threads
 * (the server compiles on its work pool, which also tokenizes): a constraint is compiled
 * outside its lock, so a slow schema holds up no other request; two threads that compile the
 * same schema at once both succeed and one result is kept. The model's token table is built
 * at the first use. */
#ifndef FL_CONSTRAINT_H
#define FL_CONSTRAINT_H

#include "cdecode.h"
#include "model.h"

/* FL_FMT_TOOL_CALL: a call as the chat templates with tools ask for it: "<tool_call>\n", a
 * value of the schema ({"name", "arguments"}), "\n</tool_call>" */
/* FL_FMT_REGEX: the whole reply matches a regular expression (the "schema" is its text) */
enum { FL_FMT_TEXT = 0, FL_FMT_JSON_OBJECT, FL_FMT_JSON_SCHEMA, FL_FMT_TOOL_CALL, FL_FMT_REGEX };

typedef struct fl_cons_cache fl_cons_cache;

/* cap: compiled constraints kept; max_bytes: their automata's and token tables' bytes kept
 * (0: no bound). The least recently used goes first; the newest stays even when it alone is
 * over max_bytes (its request holds it anyway). */
fl_cons_cache *fl_cons_cache_new(const fl_model *m, int cap, int64_t max_bytes);
void fl_cons_cache_free(fl_cons_cache *c);
/* The constraint of a format (FL_FMT_JSON_OBJECT, or FL_FMT_JSON_SCHEMA or FL_FMT_TOOL_CALL
 * with the schema's JSON text, or FL_FMT_REGEX with the pattern), a reference the caller drops with fl_cons_unref. A schema outside the subset is
 * FL_EUNSUPPORTED (FL_EFORMAT when it is not JSON) with constrain.h's message: the keyword
 * and where it is. */
int fl_cons_cache_get(fl_cons_cache *c, int format, const char *schema, fl_cons **out, fl_err *e);
/* What the cache holds now: constraints and their bytes (tests, metrics). */
void fl_cons_cache_stats(fl_cons_cache *c, int *entries, int64_t *bytes);

#endif
