/* text.h: the door to core/text/, everything between characters and token ids. It owns the
 * tokenizers (byte, tokenizer.json BPE), the chat formats that render a tool-calling example with
 * its loss mask, the tool-call parser and grader, fine-tune data (JSONL rows, splits, buckets,
 * batches) and pretraining token files. It knows the job config and base/ only: it must never
 * include a model, backend, communicator, checkpoint or session header. Rooms above it (model,
 * train) and launch/ include this header, never the ones behind it. */
#ifndef LOOM_TEXT_H
#define LOOM_TEXT_H

#include "core/text/tokenizer.h" /* text <-> ids, one interface for every tokenizer */
#include "core/text/chat.h"      /* examples, chat formats, rendering with a loss mask */
#include "core/text/toolcall.h"  /* tool calls out of generated text, graded */
#include "core/text/sft_data.h"  /* fine-tune JSONL: rows, split, buckets, batches */
#include "core/text/data.h"      /* pretraining token files and batch sampling */

#endif
