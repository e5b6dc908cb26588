/* tests/replay/sha256.h — SHA-256 (FIPS 180-4) of a byte string, as lowercase hex:
 * the replay set's fingerprint of a weight tensor's bytes (what sha256sum prints). */
#ifndef PD2BW_TESTS_REPLAY_SHA256_H
#define PD2BW_TESTS_REPLAY_SHA256_H

#include <stddef.h>

#define SHA256_HEX_LEN 64

/* out: SHA256_HEX_LEN hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char out[SHA256_HEX_LEN + 1]);

#endif
