// The playground's page script: a chat over the gateway's OpenAI-compatible API (streamed, with the
// same bearer key as any client), each answer tagged with its route and timing, `ui` answers drawn
// by the A2UI renderer next to their JSON, `agent` tool calls shown as calls, and a panel of live
// figures from GET /stats. Plain JavaScript, no build step; the renderer bundle is optional.

const $ = (id) => document.getElementById(id);
const STATS_EVERY_MS = 3000;
const TOOL_PRESET = {
  max_tokens: 256,
  tool_choice: 'auto',
  tools: [
    {type: 'function', function: {name: 'get_weather', description: 'Current weather in a city',
      parameters: {type: 'object', properties: {city: {type: 'string'}, unit: {type: 'string', enum: ['celsius', 'fahrenheit']}},
        required: ['city']}}},
    {type: 'function', function: {name: 'search_web', description: 'Search the web',
      parameters: {type: 'object', properties: {query: {type: 'string'}}, required: ['query']}}},
  ],
};

const state = {
  history: [],          // the conversation sent with each turn (OpenAI messages)
  sessionId: '',
  renderer: null,       // the A2UI renderer module, once loaded
  rendererProblem: '',  // why it is missing, when it is
  busy: false,
};

// ------------------------------------------------------------------ set-up

function newSessionId() {
  const id = 'pg-' + (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));
  sessionStorage.setItem('macaron.session', id);
  return id;
}

function startSession(fresh) {
  state.sessionId = (!fresh && sessionStorage.getItem('macaron.session')) || newSessionId();
  state.history = [];
  $('session-id').textContent = state.sessionId;
  $('log').replaceChildren();
}

async function loadRenderer() {
  try {
    state.renderer = await import('../renderer/a2ui-renderer.js');
    document.body.dataset.renderer = 'ready';
  } catch (err) {
    state.rendererProblem = 'The A2UI renderer is not installed, so ui answers are shown as JSON only. ' +
      'Run scripts/bootstrap.sh on a machine with node and npm: it installs @a2ui/lit and builds it for the gateway.';
    const note = $('renderer-note');
    note.textContent = state.rendererProblem;
    note.hidden = false;
    document.body.dataset.renderer = 'missing';
    console.warn('A2UI renderer not loaded:', err);
  }
}

function authHeaders() {
  const key = $('api-key').value.trim();
  return key ? {authorization: 'Bearer ' + key} : {};
}

async function loadModels() {
  try {
    const response = await fetch('v1/models', {headers: authHeaders()});
    if (!response.ok) return;
    const names = (await response.json()).data.map((m) => m.id);
    const select = $('model');
    const chosen = select.value;
    select.replaceChildren(...names.map((name) => {
      const option = document.createElement('option');
      option.value = name;
      option.textContent = name === 'macaron-auto' ? 'macaron-auto (the router decides)' : name;
      return option;
    }));
    if (names.includes(chosen)) select.value = chosen;
  } catch (err) {
    console.warn('models not loaded:', err);
  }
}

// ------------------------------------------------------------------ small DOM helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k.startsWith('data-')) node.setAttribute(k, v);
    else node[k] = v;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function tag(name, label, value, title) {
  return el('span', {class: 'tag', 'data-tag': name, title: title || label}, el('b', {}, label + ' '), String(value));
}

function scrollDown() {
  const log = $('log');
  log.scrollTop = log.scrollHeight;
}

// ------------------------------------------------------------------ one turn

class Turn {
  constructor(prompt) {
    this.tags = el('div', {class: 'tags'}, el('span', {class: 'muted'}, 'waiting for the route…'));
    this.text = el('div', {class: 'content'});
    this.extra = el('div', {class: 'extra'});
    this.node = el('article', {class: 'turn assistant', 'data-state': 'streaming'}, this.tags, this.text, this.extra);
    $('log').append(el('article', {class: 'turn user'}, el('div', {class: 'content'}, prompt)), this.node);
    this.content = '';
    this.toolCalls = [];
    this.route = {};
    this.summary = null;
    this.usage = null;
    this.sentAt = performance.now();
    this.firstAt = null;
    this.lastAt = null;
    this.deltas = 0;
    this.ui = null;           // the rendered | raw panes of a ui answer
    this.liveMessages = 0;    // A2UI messages rendered so far while streaming
    this.liveRenders = 0;
    scrollDown();
  }

  setRoute(headers) {
    this.route = {
      specialist: headers.get('x-macaron-specialist') || '',
      reason: headers.get('x-macaron-route-reason') || '',
      confidence: headers.get('x-macaron-route-confidence') || '',
      version: headers.get('x-macaron-adapter-version') || '',
      routeMs: headers.get('x-macaron-route-ms') || '',
      requestId: headers.get('x-request-id') || '',
    };
    this.node.dataset.specialist = this.route.specialist;
    this.renderTags();
  }

  renderTags() {
    const r = this.route;
    const s = this.summary || {};
    const pending = this.node.dataset.state === 'streaming' ? '…' : '–';
    const ttft = s.ttft_ms ?? (this.firstAt === null ? null : Math.round(this.firstAt - this.sentAt));
    let rate = s.tokens_per_s;
    if (rate === undefined || rate === null) {
      const n = this.usage ? this.usage.completion_tokens : null;
      rate = n && this.lastAt > this.firstAt ? ((n - 1) / ((this.lastAt - this.firstAt) / 1000)).toFixed(1) : null;
    }
    this.tags.replaceChildren(
      tag('specialist', 'specialist', r.specialist || '?'),
      tag('version', 'adapter', r.version || 'unversioned', 'adapter version that answered'),
      tag('reason', 'route', r.reason || '?', 'why the router chose this specialist'),
      tag('confidence', 'confidence', r.confidence || '?'),
      tag('route-ms', 'routing', r.routeMs ? r.routeMs + ' ms' : '?', 'time the router took to decide and place it'),
      tag('ttft', 'TTFT', ttft === null ? pending : ttft + ' ms', 'time to first token, measured by the gateway'),
      tag('rate', 'tok/s', rate === null ? pending : rate, 'decode tokens per second after the first token'),
      this.usage ? tag('tokens', 'tokens', `${this.usage.prompt_tokens}→${this.usage.completion_tokens}` +
        (this.usage.prompt_tokens_details?.cached_tokens ? ` (${this.usage.prompt_tokens_details.cached_tokens} cached)` : ''),
        'prompt → completion tokens') : null,
    );
  }

  onChunk(chunk) {
    const now = performance.now();
    if (chunk.macaron) this.summary = chunk.macaron;
    if (chunk.usage) this.usage = chunk.usage;
    const choice = (chunk.choices || [])[0];
    if (!choice) return;
    const delta = choice.delta || {};
    if (delta.content || delta.tool_calls) {
      if (this.firstAt === null) this.firstAt = now;
      this.lastAt = now;
      this.deltas += 1;
      this.node.dataset.deltas = String(this.deltas);  // how many pieces the answer arrived in
    }
    if (delta.content) {
      this.content += delta.content;
      if (this.route.specialist === 'ui') this.renderUiLive();
      else this.text.textContent = this.content;
      scrollDown();
    }
    for (const d of delta.tool_calls || []) {
      const call = this.toolCalls[d.index] || (this.toolCalls[d.index] = {id: '', name: '', arguments: ''});
      if (d.id) call.id = d.id;
      if (d.function?.name) call.name = d.function.name;
      if (d.function?.arguments) call.arguments += d.function.arguments;
    }
    if (this.toolCalls.length) this.renderToolCalls();
  }

  renderToolCalls() {
    const calls = this.toolCalls.filter(Boolean).map((call) => {
      let args;
      try {
        args = JSON.parse(call.arguments || '{}');
      } catch {
        args = null;
      }
      const body = args && typeof args === 'object'
        ? el('table', {class: 'args'}, ...Object.entries(args).map(([k, v]) =>
          el('tr', {}, el('th', {}, k), el('td', {}, typeof v === 'string' ? v : JSON.stringify(v)))))
        : el('pre', {class: 'raw'}, call.arguments);
      return el('div', {class: 'tool-call', 'data-tool': call.name},
        el('div', {class: 'tool-head'}, el('span', {class: 'tool-label'}, 'tool call'), ' ',
          el('code', {class: 'tool-name'}, call.name + '(…)'), el('small', {class: 'muted'}, ' ' + call.id)), body);
    });
    this.extra.replaceChildren(el('div', {class: 'tool-calls'}, ...calls));
  }

  fail(message) {
    this.node.dataset.state = 'error';
    this.extra.append(el('div', {class: 'error', role: 'alert'}, message));
    if (!this.route.specialist) this.tags.replaceChildren(el('span', {class: 'muted'}, 'no route: the request failed'));
    scrollDown();
  }

  finish() {
    this.node.dataset.state = 'done';
    this.renderTags();
    if (this.route.specialist === 'ui' && !this.toolCalls.length) this.renderUi();
  }

  /** The two panes of a ui answer (rendered | raw), made once: filled live while it streams, then for good. */
  uiLayout() {
    if (!this.ui) {
      this.ui = {view: el('div', {class: 'a2ui-view'}), raw: el('pre', {class: 'a2ui-raw'})};
      this.text.hidden = true;
      this.extra.replaceChildren(el('div', {class: 'a2ui'},
        el('div', {class: 'a2ui-pane'}, el('h3', {}, 'Rendered (A2UI v0.9, basic catalog)'), this.ui.view),
        el('div', {class: 'a2ui-pane'}, el('h3', {}, 'Raw JSON'), this.ui.raw)));
    }
    return this.ui;
  }

  /** While a ui answer streams: render the messages complete so far (a surface appears as soon as it has a root). */
  renderUiLive() {
    const {view, raw} = this.uiLayout();
    raw.textContent = this.content;
    if (!state.renderer) return;
    const messages = completeArrayItems(this.content);
    if (messages.length <= this.liveMessages) return;
    this.liveMessages = messages.length;
    try {
      state.renderer.renderA2ui(view, messages);
      this.liveRenders += 1;
      this.node.dataset.liveRenders = String(this.liveRenders);
    } catch {
      // not renderable yet (no root so far): the final check at the end says what is wrong, if anything
    }
  }

  /** What a rendered surface sends back (A2UI client-to-server action), shown, not sent: the playground is one-way. */
  showAction(action) {
    const line = el('div', {class: 'a2ui-action', 'data-action': action.name || ''},
      el('span', {class: 'tool-label'}, 'action'), ' ', el('code', {}, JSON.stringify(action)));
    this.uiLayout().view.after(line);
  }

  renderUi() {
    const {view, raw} = this.uiLayout();
    let messages = null;
    let problem = '';
    try {
      messages = JSON.parse(this.content);
      // the protocol's list wrapper ({"messages": [...]}) is accepted too
      if (messages && !Array.isArray(messages) && Array.isArray(messages.messages)) messages = messages.messages;
    } catch (err) {
      problem = 'the answer is not JSON (' + err.message + ')';
    }
    raw.textContent = messages === null ? this.content : JSON.stringify(messages, null, 2);
    if (!problem && state.renderer) {
      try {
        const counts = state.renderer.renderA2ui(view, messages, (action) => this.showAction(action));
        view.dataset.components = String(counts.components);
      } catch (err) {
        problem = err.message || String(err);
      }
    } else if (!problem) {
      view.replaceChildren(el('p', {class: 'note'}, state.rendererProblem));
    }
    if (problem) {
      view.replaceChildren(el('div', {class: 'error a2ui-invalid', role: 'alert'},
        el('b', {}, 'Not a valid A2UI description: '), problem,
        el('div', {class: 'muted'}, 'The raw answer is on the right; nothing was rendered.')));
    }
    this.node.dataset.a2ui = problem ? 'invalid' : (state.renderer ? 'rendered' : 'unrendered');
    scrollDown();
  }
}

/** The complete top-level items of a JSON array that is still arriving (`[{...}, {...}, {..` gives two). */
function completeArrayItems(text) {
  const items = [];
  let depth = 0;
  let inString = false;
  let escaped = false;
  let start = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === '\\') escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '[' || c === '{') {
      depth += 1;
      if (depth === 2) start = i;
    } else if (c === ']' || c === '}') {
      depth -= 1;
      if (depth === 1 && start >= 0) {
        try {
          items.push(JSON.parse(text.slice(start, i + 1)));
        } catch {
          return items;
        }
        start = -1;
      }
      if (depth <= 0) break;
    }
  }
  return items;
}

function errorText(status, body) {
  const e = body && body.error;
  if (!e) return `HTTP ${status}`;
  return `${status ? 'HTTP ' + status + ' · ' : ''}${e.type || 'error'}${e.code ? ' (' + e.code + ')' : ''}: ${e.message}`;
}

async function readSse(response, turn) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return true;
        const chunk = JSON.parse(data);
        if (chunk.error) {
          turn.fail(errorText(0, chunk));
          return false;
        }
        turn.onChunk(chunk);
      }
    }
  }
  return true;
}

function requestOptions() {
  const text = $('options').value.trim();
  if (!text) return {};
  const options = JSON.parse(text);  // SyntaxError: reported by send()
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new SyntaxError('request options must be a JSON object');
  }
  return options;
}

async function send(prompt) {
  let options;
  try {
    options = requestOptions();
  } catch (err) {
    $('options-box').open = true;
    const turn = new Turn(prompt);
    turn.fail('Request options are not valid JSON: ' + err.message);
    return;
  }
  const turn = new Turn(prompt);
  const messages = [...state.history, {role: 'user', content: prompt}];
  const body = {...options, model: $('model').value, messages, stream: true,
    stream_options: {include_usage: true}};
  try {
    const response = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: {'content-type': 'application/json', 'x-session-id': state.sessionId, ...authHeaders()},
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      let parsed = null;
      try {
        parsed = await response.json();
      } catch { /* not JSON: the status says enough */ }
      turn.fail(errorText(response.status, parsed));
      return;
    }
    turn.setRoute(response.headers);
    if (await readSse(response, turn)) {
      turn.finish();
      const reply = {role: 'assistant', content: turn.content || null};
      if (turn.toolCalls.length) {
        reply.tool_calls = turn.toolCalls.filter(Boolean).map((c) => ({id: c.id, type: 'function',
          function: {name: c.name, arguments: c.arguments}}));
      }
      state.history = [...messages, reply];
    }
  } catch (err) {
    turn.fail('The gateway could not be reached: ' + (err.message || err));
  } finally {
    refreshStats();
    setTimeout(refreshStats, 700);  // the gateway counts a stream's tokens just after its last byte
  }
}

// ------------------------------------------------------------------ live figures

function statLine(label, value, name) {
  return el('div', {class: 'stat', 'data-stat': name}, el('span', {}, label), el('b', {}, value));
}

function renderStats(s) {
  const mix = Object.entries(s.route_mix);
  const bars = mix.length ? mix.map(([name, m]) => el('div', {class: 'bar-row', 'data-specialist': name},
    el('span', {class: 'bar-label'}, name),
    el('span', {class: 'bar'}, el('span', {class: 'bar-fill', style: `width:${Math.round(m.share * 100)}%`})),
    el('span', {class: 'bar-value', title: Object.entries(m.reasons).map(([r, n]) => `${r}: ${n}`).join(', ')},
      `${Math.round(m.share * 100)}% (${m.requests})`)))
    : [el('p', {class: 'muted'}, 'no routed request yet')];
  const t = s.time_to_route_ms;
  const r = s.routing_ms;
  const ms = (v) => (v === null ? '–' : v + ' ms');
  const versions = Object.entries(s.versions);
  $('stats').replaceChildren(
    el('h3', {}, `Route mix (${s.routed_requests} requests)`), el('div', {class: 'bars', id: 'route-mix'}, ...bars),
    el('h3', {}, 'Routing latency (in the router)'),
    statLine('p50', ms(r.p50), 'route-p50'),
    statLine('p99', ms(r.p99), 'route-p99'),
    statLine('time to route p50 / p99 (gateway)', `${ms(t.p50)} / ${ms(t.p99)}`, 'time-to-route'),
    el('h3', {}, 'Prefix cache'),
    statLine('cached share of prompt tokens', (s.tokens.cached_share * 100).toFixed(1) + '%', 'cached-share'),
    statLine('prompt / cached tokens', `${s.tokens.prompt} / ${s.tokens.cached}`, 'tokens'),
    el('h3', {}, 'Versions serving'),
    ...(versions.length ? versions.map(([name, v]) => statLine(name,
      Object.entries(v).map(([version, n]) => `${version} (${n})`).join(', '), 'version-' + name))
      : [el('p', {class: 'muted'}, 'none yet')]),
  );
}

async function refreshStats() {
  const problem = $('stats-error');
  try {
    const response = await fetch('stats', {headers: authHeaders()});
    const body = await response.json();
    if (!response.ok) {
      problem.textContent = 'Figures unavailable: ' + errorText(response.status, body);
      problem.hidden = false;
      return;
    }
    problem.hidden = true;
    renderStats(body);
  } catch (err) {
    problem.textContent = 'Figures unavailable: ' + (err.message || err);
    problem.hidden = false;
  }
}

// ------------------------------------------------------------------ wiring

function main() {
  $('api-key').value = sessionStorage.getItem('macaron.key') || '';
  $('api-key').addEventListener('change', () => {
    sessionStorage.setItem('macaron.key', $('api-key').value.trim());
    loadModels();
    refreshStats();
  });
  $('new-session').addEventListener('click', () => startSession(true));
  for (const button of document.querySelectorAll('[data-preset]')) {
    button.addEventListener('click', () => {
      const preset = button.dataset.preset === 'tools' ? TOOL_PRESET : {max_tokens: 256};
      $('options').value = JSON.stringify(preset, null, 2);
      if (button.dataset.preset === 'tools') $('model').value = 'macaron-agent';
    });
  }
  $('composer').addEventListener('submit', async (event) => {
    event.preventDefault();
    const prompt = $('prompt').value.trim();
    if (!prompt || state.busy) return;
    state.busy = true;
    $('send').disabled = true;
    $('prompt').value = '';
    try {
      await send(prompt);
    } finally {
      state.busy = false;
      $('send').disabled = false;
      $('prompt').focus();
    }
  });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) $('composer').requestSubmit();
  });
  startSession(false);
  loadModels();
  refreshStats();
  setInterval(refreshStats, STATS_EVERY_MS);
  loadRenderer().finally(() => { document.body.dataset.ready = 'true'; });
}

main();
