/* params.c — versioned params structs: the caller's struct_size says which fields it has. */
#include "core/params.h"

#include <string.h>

#include "core/error.h"

void params_init(void *dst, size_t dst_size, const void *full, size_t full_size) {
    if (!dst || dst_size < sizeof(size_t)) return;
    memset(dst, 0, dst_size);
    memcpy(dst, full, dst_size < full_size ? dst_size : full_size);
    memcpy(dst, &dst_size, sizeof dst_size);
}

qvl_status params_take(void *full, size_t full_size, const void *caller, const char *type, qvl_error *err) {
    if (!caller) return QVL_OK;
    size_t cs;
    memcpy(&cs, caller, sizeof cs);
    if (cs < sizeof(size_t))
        return err_fail(err, QVL_ERR_INVALID_ARG,
                        "%s.struct_size is %zu: initialise the struct with %s_default() (or %s_init(p, sizeof *p))",
                        type, cs, type, type);
    if (cs > full_size) {
        const unsigned char *extra = (const unsigned char *)caller + full_size;
        for (size_t i = 0; i < cs - full_size; i++)
            if (extra[i])
                return err_fail(err, QVL_ERR_UNSUPPORTED,
                                "%s.struct_size is %zu, this libqvl %s knows %zu bytes of it, and the caller set "
                                "fields beyond them (built against a newer qvl.h)", type, cs, qvl_version(),
                                full_size);
    }
    memcpy(full, caller, cs < full_size ? cs : full_size);
    memcpy(full, &full_size, sizeof full_size);
    return QVL_OK;
}

void params_give(void *caller, const void *full, size_t full_size) {
    size_t cs;
    memcpy(&cs, caller, sizeof cs);
    memcpy((unsigned char *)caller + sizeof cs, (const unsigned char *)full + sizeof cs,
           (cs < full_size ? cs : full_size) - sizeof cs);
}
