/* tokenizer/bpe_internal.h — what the BPE files share and nothing else includes:
 * the tokenizer's tables (bpe.c), its pre-tokenizers (bpe_pretok.c) and the
 * Hugging Face tokenizer.json reader (bpe_hf.c). */
#ifndef PD2BW_TOKENIZER_BPE_INTERNAL_H
#define PD2BW_TOKENIZER_BPE_INTERNAL_H

#include <cjson/cJSON.h>

#include "runtime/io/io.h" /* io_read_all, io_read_json_object; ir.h's pd_malloc */
#include "tokenizer/tokenizer.h"

typedef struct StrSlot {
  char *key; /* NULL: empty */
  int32_t value;
} StrSlot;

typedef struct PairSlot {
  uint64_t key; /* (left id << 32 | right id) + 1; 0: empty */
  int32_t rank;
  int32_t merged;
} PairSlot;

/* How text is cut into pre-tokens (merges never cross their boundaries). */
typedef enum BpePretok {
  BPE_PRE_GPT2,   /* GPT-2's regex (bpe_pretoken_len) */
  BPE_PRE_LLAMA3, /* Llama 3's (and, with max_digits 1, Qwen2's) regex (bpe_pretoken_len_llama3) */
} BpePretok;

/* ByteLevel's add_prefix_space: a space before each piece it is handed that does not
 * start with one (the library's rule, measured with tokenizers 0.23). */
typedef enum BpePrefix {
  BPE_PREFIX_NONE,
  BPE_PREFIX_SEGMENT, /* ByteLevel with its own regex: each text between added tokens */
  BPE_PREFIX_PIECE,   /* ByteLevel after a Split: each of the Split's pieces */
} BpePrefix;

/* A tokenizer.json added token: matched in the raw text before pre-tokenization. */
typedef struct BpeAdded {
  char *content;
  size_t len;
  int32_t id;
} BpeAdded;

struct Bpe {
  StrSlot *vocab;
  size_t vocab_cap; /* power of two */
  int64_t vocab_size;
  PairSlot *merges;
  size_t merges_cap;
  int32_t next_rank;
  int32_t byte_id[256]; /* vocab id of each byte's symbol, -1 when missing */
  BpePretok pretok;
  int max_digits;     /* BPE_PRE_LLAMA3: \p{N}{1,max_digits} */
  BpePrefix prefix;
  bool ignore_merges; /* tokenizer.json model.ignore_merges: a pre-token in the vocabulary is one token */
  BpeAdded *added;    /* longest first */
  int nadded;
  bool added_first[256]; /* some added token starts with this byte */
  int32_t doc_start;     /* bpe_doc_start's token when has_doc_start */
  bool has_doc_start;
  char doc_why[256];     /* why the post-processor gives none pd2bw-data can use; "" */
};

/* Fills b's vocabulary from a JSON object {"token": id, ...}, with room for `extra`
 * more entries (bpe_vocab_add); errors name `where` ("vocab.json",
 * "tok.json: model.vocab"). */
bool bpe_vocab_from_json(Bpe *b, const cJSON *obj, size_t extra, const char *where, char *err,
                         size_t errlen);
/* Adds a token that is not in the vocabulary yet (one of the `extra`). */
void bpe_vocab_add(Bpe *b, const char *token, int32_t id);
/* Makes room for n merges (before the first bpe_add_merge). */
void bpe_merges_reserve(Bpe *b, size_t n);
/* Appends the merge (left, right) at the next rank; errors name `where`. */
bool bpe_add_merge(Bpe *b, const char *left, const char *right, const char *where, char *err,
                   size_t errlen);
/* Sets byte_id[] once the vocabulary is complete. */
void bpe_finish(Bpe *b);
/* The pre-token of Llama 3's split pattern starting at text[0] (n > 0): its length. */
size_t bpe_pretoken_len_llama3(const char *text, size_t n, int max_digits);

#endif /* PD2BW_TOKENIZER_BPE_INTERNAL_H */
