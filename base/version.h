/* version.h: loom's version, as `loom --version` prints it. */
#ifndef LOOM_VERSION_H
#define LOOM_VERSION_H

#define LOOM_VERSION "0.1.0"

#endif
