/* config_table.h: private glue between config_table.c (the field table and what is generated
 * from it) and config.c (parsing, overrides, validation). Not part of the config.h contract:
 * nothing outside core/config*.c includes it. */
#ifndef LOOM_CONFIG_TABLE_H
#define LOOM_CONFIG_TABLE_H

#include "core/config.h"

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
/* Section s in order (0 = "" the top level), NULL past the end. */
const char *config_section_name(int s);
/* Human text of field i's rule ("> 0", "one of a, b"; "" = anything). */
void config_rule_text(int i, char *buf, size_t n);
/* Shortest decimal text that reads back as exactly f. */
void config_float_text(float f, char *buf, size_t n);
/* Field i of cfg as a new cJSON value. */
cJSON *config_field_json(const job_config *cfg, int i);
/* Store a cJSON value into field i, checking its type and rule. src prefixes the one-line error
 * ("job.json", "--set train.lr"); NULL = no prefix. -1 on error, cfg unchanged. */
int config_field_set(job_config *cfg, int i, const cJSON *v, const char *src);

#endif
