// The official OpenAI Node SDK against fathom's gateway: 1,000 streamed completions at once, a
// chat completion, and the errors the SDK must classify (an unknown model is a NotFoundError
// with status 404, streamed or not). Prints one JSON line of what it saw.
// Usage: node sdk_check.js SDK_DIR GATEWAY_URL
const path = require('path');
const { OpenAI, NotFoundError } = require(path.resolve(process.argv[2], 'node_modules', 'openai'));

const client = new OpenAI({ baseURL: process.argv[3] + '/v1', apiKey: 'unused', maxRetries: 0,
                            timeout: 300 * 1000 });

async function stream() {
  const s = await client.completions.create(
      { model: 'llama', prompt: [1, 2, 3, 4], max_tokens: 20, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices.length ? chunk.choices[0].text : '';
  return (text.match(/ tok/g) || []).length;
}

async function notFound(streamed) {
  try {
    const r = await client.completions.create({ model: 'gpt-nope', prompt: 'x', stream: streamed });
    if (streamed) for await (const _ of r) { }
    return 'no error';
  } catch (e) {
    return e instanceof NotFoundError ? e.status : String(e);
  }
}

(async () => {
  const tokens = await Promise.all(Array.from({ length: 1000 }, () => stream().catch(() => -1)));
  const chat = await client.chat.completions.create(
      { model: 'llama', messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 });
  console.log(JSON.stringify({
    streams: tokens.length,
    complete: tokens.filter((n) => n === 20).length,
    failed: tokens.filter((n) => n < 0).length,
    chat_tokens: chat.usage.completion_tokens,
    not_found_streamed: await notFound(true),
    not_found_whole: await notFound(false),
  }));
})();
