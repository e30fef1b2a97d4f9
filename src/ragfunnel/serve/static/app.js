// The ragfunnel inspector: plain JavaScript against the server's /v1 API, no build step, no CDN.
"use strict";

const $ = (id) => document.getElementById(id);
const COMPARED = ["lc", "op", "fb", "auto"];

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = $("token").value || localStorage.getItem("ragfunnel-token") || "";
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

// POST the chosen files as one multipart upload (the browser sets the multipart Content-Type itself), asking for
// server-sent events: the reading's progress (OCR, a page at a time) goes to onProgress, then the stored document.
async function upload(files, onProgress) {
  const form = new FormData();
  for (const file of files) form.append("file", file, file.name);
  const h = headers();
  delete h["Content-Type"];
  h.Accept = "text/event-stream";
  const response = await fetch("/v1/documents", { method: "POST", headers: h, body: form });
  return readEvents(response, { progress: onProgress });
}

async function api(path, body) {
  const response = await fetch("/v1" + path, body === undefined ? { headers: headers() }
    : { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${response.status}: ${describe(data.detail)}`);
  return data;
}

function describe(detail) {
  if (Array.isArray(detail)) return detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
  return detail || "request failed";
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function request() {
  const options = {};
  if ($("budget").value) options.budget = Number($("budget").value);
  const body = { question: $("question").value.trim(), method: $("method").value, options };
  if ($("stored").value && !$("text").value.trim()) body.document_id = $("stored").value;
  else body.text = $("text").value;
  return body;
}

// The complete server-sent events in `buffer`, parsed as the spec says: lines end at CR LF, LF or CR (and
// nowhere else: U+2028 is text), a blank line ends an event, data lines join with LF. `rest` is the
// unfinished event, parsed again once more of it has arrived.
function takeEvents(buffer) {
  const events = [], lineEnd = /\r\n|\r|\n/g;
  let event = "message", data = [], start = 0, consumed = 0, match;
  while ((match = lineEnd.exec(buffer)) !== null) {
    if (match[0] === "\r" && match.index === buffer.length - 1) break;  // perhaps the first half of CR LF
    const line = buffer.slice(start, match.index);
    start = lineEnd.lastIndex;
    if (line === "") {
      if (data.length) events.push({ event, data: data.join("\n") });
      event = "message";
      data = [];
      consumed = start;
      continue;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let text = colon < 0 ? "" : line.slice(colon + 1);
    if (text.startsWith(" ")) text = text.slice(1);
    if (field === "event") event = text || "message";
    else if (field === "data") data.push(text);
  }
  return { events, rest: buffer.slice(consumed) };
}

// POST /v1/answer with stream: true, reading server-sent events as they come.
async function ask(body, onToken) {
  const response = await fetch("/v1/answer", { method: "POST", headers: headers(), body: JSON.stringify({ ...body, stream: true }) });
  return readEvents(response, { token: (p) => onToken(p.text), stage_started: (p) => status(`${p.name}…`) });
}

// A stream of server-sent events read as it comes: each event's payload to its handler, until `result` (returned)
// or `error` (thrown); a response that is not a stream is an error with its one-line detail.
async function readEvents(response, handlers) {
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new Error(`${response.status}: ${describe(data.detail)}`);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", result = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const text = decoder.decode(value, { stream: true });
    const seam = buffer.slice(-2) + text;  // an event ends at a blank line, which may straddle two reads
    buffer += text;
    if (!/[\r\n][\r\n]/.test(seam)) continue;  // nothing ended: a large result is not parsed again per read
    const parsed = takeEvents(buffer);
    buffer = parsed.rest;
    for (const { event, data } of parsed.events) {
      const payload = JSON.parse(data || "null");
      if (event === "result") result = payload;
      else if (event === "error") throw new Error(`${payload.status}: ${payload.detail}`);
      else if (handlers[event]) handlers[event](payload);
    }
  }
  if (!result) throw new Error("the server closed the stream without a result");
  return result;
}

// What each confidence signal measures, for people; its name in the API is its tooltip.
const SIGNAL_LABELS = {
  answer_logprob_mean: "mean log-probability of the answer's tokens",
  answer_logprob_min: "log-probability of the answer's least likely token",
  support: "answer found in the text read",
  support_chunks: "chunks read that hold the answer",
  support_score: "rank score of the best chunk holding the answer",
  answer_rank: "place of the first chunk holding the answer",
  draft_agreement: "drafts agreeing with each other",
  draft_final_agreement: "drafts agreeing with the answer",
  drafts_answered: "drafts that gave an answer",
  light_agreement: "the light model's answer agrees",
  sample_agreement: "re-sampled answers agreeing",
  judge_yes: "the model's own yes/no on its answer",
  type_match: "answer of the kind asked for",
  declined: "the model declined to answer",
  echo: "answer repeats the question",
};

function signalList(signals) {
  return Object.entries(signals || {}).flatMap(([name, value], i) => {
    const span = document.createElement("span");
    span.title = name;
    span.textContent = `${SIGNAL_LABELS[name] || name.replaceAll("_", " ")} ${value}`;
    return i ? [document.createTextNode(" · "), span] : [span];
  });
}

// The answer's calibrated confidence as a bar, the signals it came from, and auto's rungs.
function showConfidence(result) {
  const box = $("confidence");
  box.hidden = result.confidence === null || result.confidence === undefined;
  if (box.hidden) { $("caution").hidden = true; return; }
  const c = result.confidence;
  const bar = $("confidence-bar");
  bar.style.width = `${Math.round(100 * c)}%`;
  bar.className = c < 0.4 ? "low" : c < 0.7 ? "mid" : "high";
  $("confidence-value").textContent = c.toFixed(2);
  $("caution").hidden = result.supported !== false;
  $("caution").textContent = `Unsupported: confidence ${c.toFixed(2)} is low; this answer is more likely wrong `
    + "than right. Check the citations, or ask again with prefer quality or a stronger model.";
  $("signals").replaceChildren(...signalList(result.signals));
  const climb = result.trace.stages.find((s) => s.name === "escalate");
  $("rungs").replaceChildren(...(climb ? [
    ...climb.detail.rungs.map((r) => {
      const li = document.createElement("li");
      if (r.skipped || r.failed) {
        li.textContent = `${r.method}: ${r.skipped ? `skipped (${r.skipped})` : `failed (${r.failed})`}, `
          + `${r.seconds.toFixed(1)} s`;
        return li;
      }
      const added = r.added_chunks ? `, ${r.added_chunks.length} new chunk${r.added_chunks.length === 1 ? "" : "s"}` : "";
      li.textContent = `${r.method}: ${r.answer} (confidence ${r.confidence === null ? "–" : r.confidence.toFixed(2)}, `
        + `${r.seconds.toFixed(1)} s${added})` + (r.method === climb.detail.answered_by ? " ← kept" : "");
      return li;
    }),
    text(`stopped: ${climb.detail.stopped}`),
  ] : []));
}

// Each citation as a link: its file, page or chapter, and quote; a click scrolls to the passage and marks it.
function showCitations(result) {
  $("uncited").hidden = !result.citation_note;
  $("uncited").textContent = result.citation_note || "";
  $("citations").replaceChildren(...(result.citations || []).map((c) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = "#";
    a.className = "citation";
    a.textContent = c.label;
    a.addEventListener("click", (e) => { e.preventDefault(); highlight(c); });
    const quote = document.createElement("q");
    quote.textContent = c.quote;
    li.append(a, text(" "), quote);
    return li;
  }));
}

function show(result) {
  $("result").hidden = false;
  $("answer").textContent = result.answer;
  showCitations(result);
  $("answered-by").textContent = `${result.method} · ${result.trace.seconds.toFixed(1)} s · ${result.trace.input_tokens} input tokens`;
  showConfidence(result);
  const longest = Math.max(...result.trace.stages.map((s) => s.seconds), 0.001);
  $("timeline").replaceChildren(...result.trace.stages.map((s) => {
    const row = document.createElement("div");
    row.className = "stage";
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.style.width = `${(100 * s.seconds) / longest}%`;
    const took = s.detail && s.detail.cached ? "cached" : `${s.seconds.toFixed(2)} s`;
    row.append(text(s.name), bar, text(`${took} · ${s.input_tokens} in / ${s.output_tokens} out`));
    return row;
  }));
  $("drafts").replaceChildren(...(result.samples.length ? result.samples.map((s) => {
    const li = document.createElement("li");
    const answer = document.createElement("span");
    answer.className = "draft-answer";
    answer.textContent = s.answer || "(no answer line)";
    li.append(answer, text(" — " + (s.rationale || s.text)));
    return li;
  }) : [text("This method writes no drafts.")]));
  showChunks(result.chunks);
}

// The document's chunks as a virtual list: a book has hundreds, so only the rows in view, and OVERSCAN more
// on either side, are drawn, in #chunk-rows, placed at their offset inside #chunk-spacer, which is as tall as
// the whole list. A row's height is estimated from its text until it has been drawn and measured. `rows` are
// the chunks listed (all, or only those read), as indices into `chunks`; `offsets[r]` is where row r begins.
const OVERSCAN = 10, WHOLE = 50, GAP = 3;  // a list of WHOLE rows or fewer is drawn whole; GAP: the rows' margin
const list = { chunks: [], rows: [], heights: [], offsets: [0], width: 0, first: -1, last: -1,
  mark: null, cited: -1, uncite: 0, frame: 0 };

function showChunks(chunks) {
  Object.assign(list, { chunks, rows: [], mark: null, cited: -1 });
  $("chunk-count").textContent = `${chunks.filter((c) => c.read).length} of ${chunks.length} chunks read`;
  $("only-read").checked = false;
  keepingTop(() => { estimateHeights(); listRows(); });
}

// A row's height before it is drawn: its text in lines of the list's width (about 6.8 px a character at the
// chunks' font size, 18.4 px a line), a line more for its place, its padding and the gap to the next.
function estimateHeights() {
  list.width = $("chunks").clientWidth;
  const perLine = Math.max(20, (list.width - 70) / 6.8);
  list.heights = list.chunks.map((c) => 18.4 * (Math.ceil(c.text.length / perLine) + (c.where ? 1 : 0)) + 12 + GAP);
}

function listRows() {
  const only = $("only-read").checked;
  list.rows = list.chunks.flatMap((c, i) => (only && !c.read ? [] : [i]));
}

function placeRows() {
  list.offsets = [0];
  for (const i of list.rows) list.offsets.push(list.offsets.at(-1) + list.heights[i]);
  $("chunk-spacer").style.height = `${list.offsets.at(-1)}px`;
}

// Change what is listed, keeping the chunk at the top of the view there (or the next one listed).
function keepingTop(change) {
  const box = $("chunks"), top = list.rows[rowAt(box.scrollTop)];
  change();
  placeRows();
  box.scrollTop = top === undefined ? 0 : list.offsets[rowOf(top)];
  draw(true);
}

// The last row beginning at or above y (a binary search of the offsets).
function rowAt(y) {
  let lo = 0, hi = list.rows.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (list.offsets[mid] <= y) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The row of chunk i, or of the first chunk after it that is listed.
function rowOf(i) {
  const row = list.rows.findIndex((j) => j >= i);
  return row < 0 ? Math.max(0, list.rows.length - 1) : row;
}

// Draw the rows in view, unless they are drawn already; then measure them, and if they were taller or
// shorter than thought, move the list under the view so that the row at its top stays put.
function draw(force = false) {
  const box = $("chunks"), top = box.scrollTop, anchor = rowAt(top), n = list.rows.length;
  const whole = n <= WHOLE;
  const first = whole ? 0 : Math.max(0, anchor - OVERSCAN);
  const last = whole ? n : Math.min(n, rowAt(top + box.clientHeight) + 1 + OVERSCAN);
  if (!force && first === list.first && last === list.last) return;
  Object.assign(list, { first, last });
  const rows = $("chunk-rows");
  rows.style.top = `${list.offsets[first]}px`;
  rows.replaceChildren(...list.rows.slice(first, last).map((i) => chunkRow(list.chunks[i], i)));
  const before = list.offsets[anchor];
  let changed = false;
  [...rows.children].forEach((div, k) => {
    const i = list.rows[first + k], height = div.getBoundingClientRect().height + GAP;
    if (Math.abs(height - list.heights[i]) > 0.5) [list.heights[i], changed] = [height, true];
  });
  if (changed) {
    placeRows();
    box.scrollTop += list.offsets[anchor] - before;
  }
}

// Draw again at most once a frame, however often the list scrolls or the window resizes.
function redraw() {
  if (list.frame) return;
  list.frame = requestAnimationFrame(() => {
    list.frame = 0;
    if ($("chunks").clientWidth !== list.width && list.chunks.length) keepingTop(estimateHeights);
    else draw();
  });
}

function chunkRow(c, i) {
  const div = document.createElement("div");
  div.className = "chunk" + (c.read ? " read" : "") + (i === list.cited ? " cited" : "");
  div.dataset.position = c.position;
  div.dataset.start = c.start;
  div.title = (c.where ? `${c.where}; ` : "") + `chunk ${c.position}: question ${c.question_score}` + (c.draft_score === null ? "" : `, drafts ${c.draft_score}`)
    + (c.read ? ", read by the answering model" : "");
  const scores = document.createElement("div");
  scores.className = "scores";
  const q = document.createElement("span");
  q.style.background = `rgba(45, 108, 223, ${0.08 + 0.8 * c.question_score})`;
  const d = document.createElement("span");
  d.style.background = c.draft_score === null ? "transparent" : `rgba(230, 126, 34, ${0.08 + 0.8 * c.draft_score})`;
  scores.append(q, d);
  const body = document.createElement("div");
  body.className = "chunk-text";
  const at = list.mark && list.mark.chunk === i ? c.text.indexOf(list.mark.quote) : -1;
  if (at >= 0) {
    const mark = document.createElement("mark");
    mark.textContent = list.mark.quote;
    body.append(text(c.text.slice(0, at)), mark, text(c.text.slice(at + list.mark.quote.length)));
  } else {
    body.textContent = c.text;
  }
  if (c.where) {
    const where = document.createElement("div");
    where.className = "where";
    where.textContent = c.where;
    div.append(scores, where, body);
  } else {
    div.append(scores, body);
  }
  return div;
}

// Scroll to the chunk a citation quotes (listing every chunk if it was not read), mark the quote, and
// outline the chunk for two seconds.
function highlight(citation) {
  const i = list.chunks.findLastIndex((c) => c.start <= citation.context_start);
  if (i < 0) return;
  if ($("only-read").checked && !list.chunks[i].read) {
    $("only-read").checked = false;
    keepingTop(listRows);
  }
  Object.assign(list, { mark: { chunk: i, quote: citation.quote }, cited: i });
  const box = $("chunks"), row = rowOf(i);
  for (let pass = 0; pass < 2; pass++) {  // the second uses the heights the first measured
    box.scrollTop = list.offsets[row] - (box.clientHeight - list.heights[i]) / 2;
    draw(true);
  }
  $("chunk-rows").children[row - list.first]?.scrollIntoView({ behavior: "smooth", block: "center" });
  clearTimeout(list.uncite);
  list.uncite = setTimeout(() => {
    list.cited = -1;
    for (const div of document.querySelectorAll("#chunks .cited")) div.classList.remove("cited");
  }, 2000);
}

function text(value) {
  return document.createTextNode(value);
}

async function onAsk() {
  const body = request();
  if (!body.question) return status("Type a question first.", true);
  busy(true);
  $("result").hidden = false;
  $("answer").textContent = "";
  status("waiting for the server…");
  try {
    const result = await ask(body, (t) => { status("answering…"); $("answer").textContent += t; });
    show(result);
    status(`done in ${result.trace.seconds.toFixed(1)} s`);
  } catch (e) {
    status(e.message, true);
  } finally {
    busy(false);
  }
}

async function onCompare() {
  const base = request();
  if (!base.question) return status("Type a question first.", true);
  busy(true);
  $("comparison").hidden = false;
  const rows = $("compare-rows");
  rows.replaceChildren();
  for (const method of COMPARED) {
    status(`${method}…`);
    const tr = document.createElement("tr");
    try {
      const began = performance.now();  // the method's own wall time: loading, waiting and answering
      const r = await api("/answer", { ...base, method });
      const wall = (performance.now() - began) / 1000;
      for (const cell of [method, r.answer, r.confidence === null ? "–" : r.confidence.toFixed(2),
        wall.toFixed(1), r.trace.input_tokens,
        r.chunks.filter((c) => c.read).map((c) => c.position).join(", ") || "all"]) {
        const td = document.createElement("td");
        td.textContent = cell;
        tr.append(td);
      }
    } catch (e) {
      tr.append(...[method, e.message].map((v) => { const td = document.createElement("td"); td.textContent = v; return td; }));
    }
    rows.append(tr);
  }
  status("compared");
  busy(false);
}

function busy(on) {
  $("ask").disabled = on;
  $("compare").disabled = on;
}

// The server's indexes (GET /v1/indexes): each with its documents, what it is doing, and its last update; a
// watched folder's files and the files it could not read listed under it. Asked again every few seconds while a
// folder is watched, so a file dropped in shows as pending, read, then indexed.
const INDEX_POLL_MS = 2000;
const openIndexes = new Set();  // the indexes whose file lists are open, kept open as the table is drawn again
let indexTimer = 0;

async function showIndexes() {
  clearTimeout(indexTimer);
  let indexes;
  try {
    indexes = await api("/indexes");
  } catch (e) {
    return;  // the status line says what is wrong with the server
  }
  $("indexes").hidden = !indexes.length;
  $("index-rows").replaceChildren(...indexes.flatMap(indexRows));
  if (indexes.some((i) => i.kind === "watched")) indexTimer = setTimeout(showIndexes, INDEX_POLL_MS);
}

function indexState(i) {
  if (i.progress) {
    const p = i.progress;
    return p.stage === "reading" ? `reading ${p.done} of ${p.total} files` : `${p.stage}…`;
  }
  if (i.error) return `update failed: ${i.error}`;
  if (i.pending.length) return `${i.pending.length} file${i.pending.length === 1 ? "" : "s"} changed, waiting`;
  if (!i.ready) return i.kind === "watched" ? "no index yet: no readable file" : "cannot be read";
  return i.kind === "watched" ? `watching ${i.folder}` : "fixed";
}

function indexRows(i) {
  const row = document.createElement("tr");
  const u = i.last_update;
  const last = u ? `${new Date(u.finished * 1000).toLocaleTimeString()}: ${u.added} added, ${u.changed} changed, `
    + `${u.removed} removed (${u.files_read.length} files read, ${u.seconds.toFixed(1)} s)` : "–";
  for (const cell of [i.name, i.documents, indexState(i), last]) {
    const td = document.createElement("td");
    td.textContent = cell;
    row.append(td);
  }
  if (i.error) row.children[2].className = "problem";
  if (i.files === null) return [row];
  const detail = document.createElement("tr");
  const td = document.createElement("td");
  td.colSpan = 4;
  const files = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = `${i.files.length} files` + (i.failed.length ? `, ${i.failed.length} not readable` : "")
    + (i.skipped.length ? `, ${i.skipped.length} skipped` : "");
  const list = document.createElement("ul");
  list.append(...i.failed.concat(i.skipped).map((f) => item(`${f.name}: ${f.reason}`, "problem")),
    ...i.files.map((f) => item(`${f.name} (${f.documents} document${f.documents === 1 ? "" : "s"})`)));
  files.append(summary, list);
  files.open = openIndexes.has(i.name);
  files.addEventListener("toggle", () => (files.open ? openIndexes.add(i.name) : openIndexes.delete(i.name)));
  td.append(files);
  detail.append(td);
  return [row, detail];
}

function item(value, className = "") {
  const li = document.createElement("li");
  li.textContent = value;
  li.className = className;
  return li;
}

async function start() {
  $("token").value = localStorage.getItem("ragfunnel-token") || "";
  $("token").addEventListener("change", () => { localStorage.setItem("ragfunnel-token", $("token").value); load(); });
  $("ask").addEventListener("click", onAsk);
  $("compare").addEventListener("click", onCompare);
  $("only-read").addEventListener("change", () => keepingTop(listRows));
  $("chunks").addEventListener("scroll", redraw);
  window.addEventListener("resize", redraw);
  $("question").addEventListener("keydown", (e) => { if (e.key === "Enter") onAsk(); });
  $("upload").addEventListener("change", async () => {
    const files = [...$("upload").files];
    if (!files.length) return;
    status("reading…");
    const progress = (p) => status(`${p.what}: page ${p.done} of ${p.total}…`);
    const doc = await upload(files, progress).catch((e) => status(e.message, true));
    if (doc) {
      await load();
      $("stored").value = doc.id;
      $("text").value = "";
      const count = (n, what) => ` (${n} ${what}${n === 1 ? "" : "s"})`;
      const parts = doc.files.map((f) => f.name + (f.pages ? count(f.pages, "page") : f.chapters ? count(f.chapters, "chapter") : ""));
      status(`stored ${parts.join(", ")}: ${doc.words} words`);
    }
  });
  await load();
}

async function load() {
  try {
    const [models, methods, documents] = await Promise.all([api("/models"), api("/methods"), api("/documents")]);
    $("models").textContent = `light ${models.light.name} · strong ${models.strong.name}`;
    const chosen = $("method").value || methods.default;
    const overText = Object.keys(methods.methods).filter((m) => methods.kinds[m] === "context");
    $("method").replaceChildren(...overText.map((m) => new Option(m, m, false, m === chosen)));
    $("stored").replaceChildren(new Option("— a stored document —", ""),
      ...documents.map((d) => new Option(`${d.name || d.id} (${d.words} words)`, d.id)));
    status("");
    showIndexes();
  } catch (e) {
    status(e.message.startsWith("401") ? "This server needs a token: type it in the token box." : e.message, true);
  }
}

start();
