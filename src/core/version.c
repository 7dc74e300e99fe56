/* version.c — the library's version at run time (the header's QVL_VERSION_* when the library was built). */
#include "qvl.h"

#define QVL_STR_(x) #x
#define QVL_STR(x) QVL_STR_(x)

const char *qvl_version(void) {
    return QVL_STR(QVL_VERSION_MAJOR) "." QVL_STR(QVL_VERSION_MINOR) "." QVL_STR(QVL_VERSION_PATCH);
}

int qvl_version_number(void) { return QVL_VERSION_NUMBER; }
