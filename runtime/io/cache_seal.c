/* runtime/io/cache_seal.c — the checksum that ends every on-disk cache entry (io.h).
 *
 * The stage-program cache (stage_cc.c) and the cubin cache (cuda/nvrtc_compile.c)
 * decide a hit by a file's name; a truncated or bit-flipped file under a good name
 * crashed the run (SIGBUS, SIGILL). Each entry therefore ends in a seal: "PD2BWSUM",
 * the 64-bit FNV-1a hash of the bytes before it and their count, both as 16 hex
 * digits. FNV-1a is the hash the cache keys and the plans' launch lists already use
 * (codegen_hash_hex, contract/contract.h): every single-byte change changes it, a
 * truncation changes the count, and it costs about 1 ms per MB. It guards against
 * damage, not an adversary: whoever can write the cache can write a valid seal. The
 * seal is written before the entry's rename, so an entry and its checksum arrive
 * together. */
#include "runtime/io/io.h"
#include "contract/contract.h"

#include <inttypes.h>
#include <string.h>

#define SEAL_MAGIC "PD2BWSUM"

void cache_seal_make(const void *p, size_t n, char out[CACHE_SEAL_BYTES + 1]) {
  char h[17];
  codegen_hash_hex(p, n, h);
  snprintf(out, CACHE_SEAL_BYTES + 1, SEAL_MAGIC "%s%016" PRIx64, h, (uint64_t)n);
}

bool cache_seal_check(const void *p, size_t n, char *why, size_t whylen) {
  const char *end = (const char *)p + n - CACHE_SEAL_BYTES;
  if (n <= CACHE_SEAL_BYTES || memcmp(end, SEAL_MAGIC, strlen(SEAL_MAGIC)) != 0) {
    snprintf(why, whylen, "%zu bytes with no checksum at the end: truncated", n);
    return false;
  }
  char s[CACHE_SEAL_BYTES + 1];
  cache_seal_make(p, n - CACHE_SEAL_BYTES, s);
  if (memcmp(end, s, CACHE_SEAL_BYTES) != 0) {
    snprintf(why, whylen, "its checksum does not match its bytes");
    return false;
  }
  return true;
}
