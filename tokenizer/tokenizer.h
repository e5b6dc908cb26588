/* tokenizer/tokenizer.h — text to token ids: byte-level byte-pair encoding, GPT-2's
 * vocab.json + merges.txt and Hugging Face's tokenizer.json, for pd2bw-data.
 *
 * This folder (tokenizer/, library pd2bw_tokenizer) owns the tables and encoding
 * (bpe.c), the pre-tokenizers (bpe_pretok.c) and the tokenizer.json reader
 * (bpe_hf.c). It lies beside the runtime, not in it: pd2bwrun reads token files
 * (runtime/io/io.h: data.c) and never text, so only pd2bw-data links this (and
 * utf8proc). Ids are below 2^31 (the trainer's int32); token files hold them as
 * uint16 when the vocabulary fits (at most 65536 ids) and as uint32 otherwise.
 * Invariants: the ids are the reference tokenizer's for every text it accepts;
 * what would tokenise differently is refused, naming the file and the key. */
#ifndef PD2BW_TOKENIZER_H
#define PD2BW_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The loaders fail as runtime/io/io.h's readers do: false/NULL, with a one-line
 * message naming the file in (err, errlen); IO_ERR_LEN always suffices. */
typedef struct Bpe Bpe;
/* The largest id a vocabulary may give: the vocabulary size (1 + the largest id) is
 * then an int32, as the trainer's ids are. */
#define BPE_MAX_ID (INT32_MAX - 1)

/* Loads a GPT-2 style vocab.json ({"token": id, ...}, tokens spelled with
 * GPT-2's byte-to-unicode map) and merges.txt ("a b" per line, highest
 * priority first, an optional "#version" first line). */
Bpe *bpe_load(const char *vocab_path, const char *merges_path, char *err, size_t errlen);
/* Loads a Hugging Face tokenizer.json byte-level BPE: vocabulary, merges, added
 * (special) tokens and the pre-tokenizer's split pattern (GPT-2's, Llama 3's or
 * Qwen2's). What would tokenise differently from the library is refused naming
 * the file and key ("tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: ..."). */
Bpe *bpe_load_hf(const char *path, char *err, size_t errlen);
void bpe_destroy(Bpe *b);
/* 1 + the largest id in vocab.json. */
int64_t bpe_vocab_size(const Bpe *b);
/* Id of a vocabulary entry spelled in byte-to-unicode form, or -1. */
int64_t bpe_token_id(const Bpe *b, const char *token);
/* The token a tokenizer.json's post-processor puts before every text (Llama 3's
 * "<|begin_of_text|> $A"), which the library's encode and llm.c's data scripts put
 * before each document; -1 when it puts none (GPT-2's files; a ByteLevel, or no,
 * post-processor). -1 with *why ("tok.json: post_processor: ...") when it would put
 * tokens some other way (after the text, two before it, a RobertaProcessing); else
 * *why is NULL. */
int64_t bpe_doc_start(const Bpe *b, const char **why);

/* A growable array of token ids. */
typedef struct TokenBuf {
  uint32_t *ids;
  size_t n, cap;
} TokenBuf;
void tokenbuf_push(TokenBuf *t, uint32_t id);
void tokenbuf_free(TokenBuf *t);

/* Appends the tokens of text[0, n) to out. Fails only when the vocabulary
 * lacks the symbol of a single byte: then *bad_offset is that byte's offset in
 * text (tokens before it may have been appended). b == NULL encodes bytes:
 * token = byte value (vocab 256). */
bool bpe_encode(const Bpe *b, const char *text, size_t n, TokenBuf *out, size_t *bad_offset);
/* The vocabulary spelling of one byte (GPT-2's byte-to-unicode map), into out. */
const char *bpe_byte_symbol(uint8_t byte, char out[4]);
/* Length in bytes of the pre-token (GPT-2's regex) that starts text[0]; n > 0. */
size_t bpe_pretoken_len(const char *text, size_t n);
/* GPT-2's byte-to-unicode map: the code point that spells byte `byte`. */
uint32_t bpe_byte_to_unicode(uint8_t byte);
/* Whether text[0, n) reads as text: false, with *offset set to the first
 * offending byte and *why to "NUL byte" or "invalid UTF-8", when it holds a
 * NUL byte or a byte that is not part of valid UTF-8. A multi-byte sequence
 * cut off by the end of the buffer counts as valid (the buffer may be the
 * first block of a longer file). */
bool text_check(const char *text, size_t n, size_t *offset, const char **why);

#endif
