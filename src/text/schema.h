/*
 * schema.h - a JSON Schema compiled into a GBNF grammar (schema.c), for constrained output: OpenAI's
 * response_format json_schema / json_object, llama-server's json_schema, Ollama's format.
 *
 * The grammar's rule `root` matches JSON texts valid under the schema: one value, no whitespace before it,
 * bounded whitespace between tokens and after it. Properties come in the schema's order, numbers in plain forms
 * with bounded digits; what the compiler cannot express exactly it refuses with a message naming the keyword and
 * where it is, never dropping a constraint (see schema.c for the conventions and what is supported).
 */
#ifndef DF_SCHEMA_H
#define DF_SCHEMA_H

#include <stddef.h>

#define SCHEMA_MAX_DEPTH 64          /* nesting of schemas (objects in objects, $ref chains) */
#define SCHEMA_MAX_OUTPUT (1 << 20)  /* bytes of grammar text */
#define SCHEMA_MAX_REPEAT 10000      /* minItems, minLength, {m,n} of patterns, prefixItems */

/* Compile the JSON Schema text schema[0..len) into a GBNF grammar (malloc'd NUL-terminated text in *out) whose rule
 * `root` matches the JSON texts valid under it. 0, or -1 with err naming what is wrong or not supported (the
 * keyword and where: "'patternProperties' at /properties/a is not supported"). */
int schema_to_gbnf(const char *schema, size_t len, char **out, char *err, size_t errlen);

#endif
