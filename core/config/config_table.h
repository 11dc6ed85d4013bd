/* config_table.h: the field table (config_table.c) as config.c (parsing, overrides, validation)
 * and config_docs.c (docs/config.md) read it; calls go one way, down to the table. Not part of
 * the config.h contract: nothing outside core/config/ includes it. */
#ifndef LOOM_CONFIG_TABLE_H
#define LOOM_CONFIG_TABLE_H

#include "core/config/config.h"

#include <cjson/cJSON.h>

/* Allowed values of one field: numbers within [lo, hi] (either end open), strings one of
 * choices ("a|b|c"; NULL = any). */
typedef struct config_rule {
    double lo, hi;
    int lo_open, hi_open;
    const char *choices;
} config_rule;

/* Rule of field i of config_fields(). */
const config_rule *config_rule_of(int i);
/* Index of the field with this dotted path, or -1. */
int config_field_find(const char *path);
/* 1 if name is a section ("model", "train", ...). */
int config_is_section(const char *name);
/* A section of the table: name ("" = top level), title and one-line doc for docs/config.md. */
typedef struct config_section {
    const char *name, *title, *doc;
} config_section;

/* Section s in order (0 = "" the top level), NULL past the end. */
const char *config_section_name(int s);
const config_section *config_section_of(int s);
/* Human text of field i's rule ("> 0", "one of a, b"; "" = anything). */
void config_rule_text(int i, char *buf, size_t n);
/* Shortest decimal text that reads back as exactly f. */
void config_float_text(float f, char *buf, size_t n);
/* Field i of cfg as a new cJSON value. */
cJSON *config_field_json(const job_config *cfg, int i);

#endif
