/* pyjson.h: JSON numbers as Python's json module reads and writes them, for the renderers that
 * stand for a template (Jinja's tojson and json.dumps are Python's json): json.loads keeps an
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

#endif
