/*
 * Link test of the installed-style C interface: a plain C program that includes cuframes.h
 * and links libcuframes.a through pkg-config (`pkg-config --static --cflags --libs cuframes`),
 * as FFmpeg's configure does. Run by scripts/check-c-link.sh; exits 0 when all is well.
 */
#include <stdio.h>
#include <string.h>

#include "cuframes.h"

int main(void)
{
    int failures = 0;
    uint32_t version = cuframes_protocol_version();
    const char *too_many = cuframes_strerror(CUFRAMES_ERR_TOO_MANY);
    const char *unknown = cuframes_strerror(12345);

    if (version != CUFRAMES_PROTOCOL_VERSION || version != 4) {
        fprintf(stderr, "link_smoke: cuframes_protocol_version() = %u, expected 4\n",
                (unsigned)version);
        failures++;
    }
    if (!too_many || !strstr(too_many, "too many")) {
        fprintf(stderr, "link_smoke: cuframes_strerror(CUFRAMES_ERR_TOO_MANY) = \"%s\"\n",
                too_many ? too_many : "(null)");
        failures++;
    }
    if (!unknown || strcmp(unknown, "unknown error") != 0) {
        fprintf(stderr, "link_smoke: cuframes_strerror(12345) = \"%s\"\n",
                unknown ? unknown : "(null)");
        failures++;
    }
    if (failures)
        return 1;
    printf("link_smoke: protocol %u, strerror(CUFRAMES_ERR_TOO_MANY) = \"%s\"\n",
           (unsigned)version, too_many);
    return 0;
}
