/* pyjson.h: JSON as Python's json module reads and writes it, for the renderers that stand for a
 * template (Jinja's tojson and json.dumps are Python's json). Numbers: json.loads keeps an
 * integer's digits exactly and makes every number written with '.', 'e' or 'E' a float, whose
 * repr json.dumps prints ("30.0" stays 30.0, "30" stays 30, "1e5" becomes 100000.0). cJSON keeps
 * only a double, so a parsed document's numbers get their literal text first. */
#ifndef LOOM_PYJSON_H
#define LOOM_PYJSON_H

#include <stddef.h>

#include <cJSON.h>

/* Give each number of root (parsed by cJSON from text[0..n)) its literal text in valuestring,
 * in document order (cJSON_Duplicate copies it; cJSON_Delete frees it); refuse what Python's
 * json.loads refuses but cJSON takes (01, 1., a raw control character inside a string).
 * 0, or -1 + loom_fail. */
int pyjson_keep_numbers(cJSON *root, const char *text, size_t n);

/* Room pyjson_number needs for a float's repr. */
#define PYJSON_NUMBER_BUF 40

/* Number v as Python prints what json.loads made of it: an integer's digits ("-0" is 0), a
 * float's repr (shortest digits that read back; fixed notation for 1e-4 <= |x| < 1e16, with ".0"
 * when integral; else d.ddde+XX; Infinity, -Infinity, NaN). Without its literal text (a number
 * made in C) an integral value under 2^53 prints as an integer. Returns v's own text or tmp. */
const char *pyjson_number(const cJSON *v, char tmp[PYJSON_NUMBER_BUF]);

/* A growing text: s (NUL-ended, NULL until the first add; the caller frees it), n bytes. On
 * running out of memory err is set and later adds are dropped. Zero-initialised = empty. */
typedef struct pyjson_buf {
    char *s;
    size_t n, cap;
    int err;
} pyjson_buf;

void pyjson_add(pyjson_buf *b, const char *s, size_t n);
void pyjson_str(pyjson_buf *b, const char *s);

/* s as json.dumps writes a str with ensure_ascii=False: quoted, \" \\ \n \r \t \b \f escaped,
 * other control characters as \u00XX, everything else (UTF-8 included) as it is. */
void pyjson_string(pyjson_buf *b, const char *s);

/* obj[key] as the dict json.loads builds holds it: the last of duplicate keys (NULL: none, or
 * obj is no object). */
const cJSON *pyjson_get(const cJSON *obj, const char *key);

/* json.dumps(v, ensure_ascii=False, separators=(item_sep, key_sep), indent=indent) of the value
 * json.loads made (a dict's keys once each, where each first came, with its last value; NULL
 * is null). indent < 0: None (one line); else each item on its own line, indent spaces a
 * level, and empty containers stay [] and {}. The templates' forms: tojson (", ", ": ", -1);
 * Llama 3's json.dumps(indent=4) (",", ": ", 4); Needle's compact (",", ":", -1). */
void pyjson_dump(pyjson_buf *b, const cJSON *v, const char *item_sep, const char *key_sep, int indent);

#endif
