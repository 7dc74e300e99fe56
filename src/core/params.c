/* params.c — versioned params structs: the caller's struct_size says which fields it has. */
#include "core/params.h"

#include <stddef.h>
#include <string.h>

#include "core/error.h"

/* struct_size says which fields a caller has only if no field ever lands where an older version had padding (an
 * older caller passes its sizeof, padding included, and may have left anything there): every versioned struct
 * ends with its last field, on every ABI the library builds for. A struct that fails this needs a reserved field
 * in its padding before anything is appended. */
#define ENDS_WITH(T, f) _Static_assert(offsetof(T, f) + sizeof(((T *)0)->f) == sizeof(T), #T " ends in padding")
ENDS_WITH(qvl_load_params, reserved1);
ENDS_WITH(qvl_limits, max_video_decode_pixels);
ENDS_WITH(qvl_ctx_params, limits);
ENDS_WITH(qvl_preprocess_params, max_video_tokens);
ENDS_WITH(qvl_video_params, limits);
ENDS_WITH(qvl_decode_params, limits);
ENDS_WITH(qvl_item, decode);
ENDS_WITH(qvl_plan_params, cancel_user);
ENDS_WITH(qvl_synth_params, deepstack_index);
ENDS_WITH(qvl_cache_params, reserved1);

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
