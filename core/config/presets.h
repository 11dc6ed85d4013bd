/* presets.h: the model presets of configs/models/<name>.json, embedded at build time (see
 * core/CMakeLists.txt). The table ends with {NULL, NULL}. */
#ifndef LOOM_PRESETS_H
#define LOOM_PRESETS_H

typedef struct preset_file {
    const char *name; /* file name without .json */
    const char *json; /* its text */
} preset_file;

extern const preset_file loom_presets[];

#endif
