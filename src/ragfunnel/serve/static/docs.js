// The API reference, drawn from the server's own /openapi.json: every path, what it takes and what it
// answers. Served from the package itself, so it works offline and under the page's CSP. Every string from
// the schema reaches the page as text (textContent), never as markup.
//
// How a "$ref" is found (tests/test_api_docs_page.py checks the server's document by the same rules):
// a ref is a JSON pointer ("#/components/schemas/AnswerIn", "#/$defs/Message"). Its scopes are the document
// and every object holding "$defs" or "definitions" on the way from the document down to the ref, itself
// included; the pointer is tried in the innermost scope first, then outwards. So a pydantic schema that
// carries its own "$defs" (as the chat request body does) resolves its refs against itself, and
// "#/components/..." falls through to the document. Refs to other files cannot be followed offline.
"use strict";

const VERBS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

// The scopes a ref inside `node` is looked up in: `scopes`, and `node` itself if it holds definitions.
function within(scopes, node) {
  return isObject(node) && (isObject(node.$defs) || isObject(node.definitions)) ? [...scopes, node] : scopes;
}

// The reference tokens of a ref's "#..." fragment (RFC 6901), or null for what is not a local JSON pointer.
function pointer(ref) {
  if (typeof ref !== "string" || !ref.startsWith("#")) return null;
  let fragment;
  try {
    fragment = decodeURIComponent(ref.slice(1));
  } catch {
    return null;
  }
  if (fragment === "") return [];
  if (!fragment.startsWith("/")) return null; // a named anchor: not a pointer
  return fragment.slice(1).split("/").map((token) => token.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function step(node, token) {
  if (Array.isArray(node)) return /^(0|[1-9][0-9]*)$/.test(token) && +token < node.length ? node[+token] : undefined;
  return isObject(node) && Object.hasOwn(node, token) ? node[token] : undefined;
}

// Where `ref` points, tried from the innermost scope out: {node, scopes (the target's own), name}, or null.
function lookup(ref, scopes) {
  const tokens = pointer(ref);
  if (tokens === null) return null;
  for (let i = scopes.length - 1; i >= 0; i--) {
    let node = scopes[i];
    let chain = scopes.slice(0, i + 1);
    for (const token of tokens) {
      node = step(node, token);
      if (node === undefined) break;
      chain = within(chain, node);
    }
    if (isObject(node)) return { node, scopes: chain, name: node.title || tokens[tokens.length - 1] };
  }
  return null;
}

// A schema with its refs followed: {node, scopes, name}; node is null (and `problem` says why) when a ref
// cannot be followed or the refs go round in a circle.
function deref(schema, scopes) {
  let name;
  const followed = new Set();
  scopes = within(scopes, schema);
  while (isObject(schema) && typeof schema.$ref === "string") {
    if (followed.has(schema)) return { node: null, scopes, name, problem: `circular $ref ${schema.$ref}` };
    followed.add(schema);
    const hit = lookup(schema.$ref, scopes);
    if (!hit) return { node: null, scopes, name, problem: `unresolved $ref ${schema.$ref}` };
    ({ node: schema, scopes, name } = hit);
  }
  return { node: isObject(schema) ? schema : {}, scopes, name };
}

// An object schema with fields gets its own table, under its name; everything else is written inline.
const isModel = (node) => isObject(node.properties);

// The short type of a schema ("string | null", "Message[]"). Objects with fields met on the way go on `models`
// to be shown after; `active` holds the schemas being written, so a recursive one is named, not expanded.
function typeOf(schema, scopes, models, active = new Set()) {
  const { node, scopes: inner, name, problem } = deref(schema, scopes);
  if (node === null) return problem;
  if (isModel(node)) {
    const label = name || node.title || `{${Object.keys(node.properties).join(", ")}}`;
    models.push({ node, scopes: inner, name: label });
    return label;
  }
  if (active.has(node)) return name || "(recursive)";
  active.add(node);
  try {
    const of = (child) => typeOf(child, inner, models, active);
    if (node.const !== undefined) return JSON.stringify(node.const);
    if (Array.isArray(node.enum)) return node.enum.map((v) => JSON.stringify(v)).join(" | ");
    for (const [key, joint] of [["anyOf", " | "], ["oneOf", " | "], ["allOf", " & "]]) {
      if (Array.isArray(node[key])) return node[key].map(of).join(joint);
    }
    const types = Array.isArray(node.type) ? node.type : [node.type];
    return types.map((type) => {
      if (type === "array" && Array.isArray(node.prefixItems)) return `[${node.prefixItems.map(of).join(", ")}]`;
      if (type === "array") return `${node.items === undefined ? "any" : of(node.items)}[]`;
      if (type === "object" && isObject(node.additionalProperties)) return `{string: ${of(node.additionalProperties)}}`;
      if (type === undefined) return name || "any";
      return node.format ? `${type} (${node.format})` : String(type);
    }).join(" | ");
  } finally {
    active.delete(node);
  }
}

function fieldsTable(node, scopes, models) {
  const table = element("table", undefined, "fields");
  const required = Array.isArray(node.required) ? node.required : [];
  for (const [name, property] of Object.entries(node.properties)) {
    const row = table.insertRow();
    row.insertCell().append(element("code", name + (required.includes(name) ? "" : "?")));
    row.insertCell().append(element("code", typeOf(property, scopes, models)));
    const target = deref(property, scopes).node || {};
    const notes = [property?.description || target.description || ""];
    if (property?.default !== undefined) notes.push(`default ${JSON.stringify(property.default)}`);
    row.insertCell().textContent = notes.filter(Boolean).join("; ");
  }
  return table;
}

// A schema as a fields table (or its type, when it is not an object with fields), followed by every named
// object it refers to, each once: `shown` breaks the cycles of recursive models.
function schemaView(schema, scopes, shown) {
  const view = element("div", undefined, "schema");
  const models = [];
  const { node, scopes: inner, name, problem } = deref(schema, scopes);
  if (node === null) view.append(element("p", problem, "problem"));
  else if (isModel(node)) {
    shown.add(node);
    if (name || node.title) view.append(element("h4", name || node.title));
    if (node.description) view.append(element("p", node.description));
    view.append(fieldsTable(node, inner, models));
  } else {
    const line = element("p");
    line.append(element("code", typeOf(node, inner, models)));
    view.append(line);
  }
  while (models.length) {
    const model = models.shift();
    if (shown.has(model.node)) continue;
    shown.add(model.node);
    view.append(element("h4", model.name));
    if (model.node.description) view.append(element("p", model.node.description));
    view.append(fieldsTable(model.node, model.scopes, models));
  }
  return view;
}

// An object of the document that may itself be a ref (a path item, parameter, request body or response),
// with the scopes of what it stands for.
function followed(value, scopes) {
  const hit = deref(value, scopes);
  if (hit.node === null) throw new Error(hit.problem);
  return hit;
}

// Parameters are short: a name and a type each (a named object among them is named, not tabulated).
function parametersView(parameters, scopes) {
  const table = element("table", undefined, "fields");
  for (const { node: parameter, scopes: inner } of parameters.map((p) => followed(p, scopes))) {
    const row = table.insertRow();
    row.insertCell().append(element("code", String(parameter.name) + (parameter.required ? "" : "?")));
    row.insertCell().textContent = `in ${parameter.in}`;
    row.insertCell().append(element("code", parameter.schema ? typeOf(parameter.schema, inner, []) : "any"));
    row.insertCell().textContent = parameter.description || "";
  }
  return table;
}

function contentView(content, scopes, shown) {
  const view = element("div");
  for (const [mediaType, media] of Object.entries(isObject(content) ? content : {})) {
    const schema = isObject(media) ? media.schema : undefined;
    const empty = !isObject(schema) || Object.keys(schema).length === 0;
    view.append(element("p", empty ? `${mediaType}: any` : mediaType, "media"));
    if (!empty) view.append(schemaView(schema, scopes, shown));
  }
  return view;
}

function endpointView(verb, path, operation, pathParameters, scopes) {
  const section = element("section", undefined, "endpoint");
  section.id = `${verb}-${path}`;
  section.dataset.method = verb.toUpperCase();
  section.dataset.path = path;
  section.append(element("h2", `${verb.toUpperCase()} ${path}`));
  try {
    if (operation.summary) section.append(element("p", operation.summary, "summary"));
    if (operation.description) section.append(element("p", operation.description));
    const shown = new Set(); // each named object once per endpoint
    const parameters = [...pathParameters, ...(Array.isArray(operation.parameters) ? operation.parameters : [])];
    if (parameters.length) section.append(element("h3", "parameters"), parametersView(parameters, scopes));
    if (operation.requestBody !== undefined) {
      const { node: body, scopes: inner } = followed(operation.requestBody, scopes);
      section.append(element("h3", `request body${body.required ? "" : " (optional)"}`));
      if (body.description) section.append(element("p", body.description));
      section.append(contentView(body.content, inner, shown));
    }
    section.append(element("h3", "responses"));
    for (const [code, value] of Object.entries(isObject(operation.responses) ? operation.responses : {})) {
      const { node: response, scopes: inner } = followed(value, scopes);
      section.append(element("p", `${code} ${response.description || ""}`.trim(), "answers"));
      section.append(contentView(response.content, inner, shown));
    }
  } catch (error) {
    section.append(element("p", `could not show this endpoint: ${error.message}`, "problem"));
  }
  return section;
}

async function main() {
  const list = document.getElementById("endpoints");
  const reply = await fetch("openapi.json");
  if (!reply.ok) throw new Error(`the server answered ${reply.status}`);
  const spec = await reply.json();
  if (!isObject(spec) || !isObject(spec.paths)) throw new Error("it has no paths");
  const contents = element("ul", undefined, "contents");
  const sections = [];
  for (const [path, item] of Object.entries(spec.paths)) {
    let operations, scopes;
    try {
      ({ node: operations, scopes } = followed(item, [spec]));
    } catch (error) {
      sections.push(element("p", `could not show ${path}: ${error.message}`, "problem"));
      continue;
    }
    const pathParameters = Array.isArray(operations.parameters) ? operations.parameters : [];
    for (const verb of VERBS.filter((v) => isObject(operations[v]))) {
      const section = endpointView(verb, path, operations[verb], pathParameters, scopes);
      const link = element("a", section.querySelector("h2").textContent);
      link.href = `#${encodeURIComponent(section.id)}`;
      const entry = element("li");
      entry.append(link);
      contents.append(entry);
      sections.push(section);
    }
  }
  list.replaceChildren(element("p", isObject(spec.info) ? spec.info.description || "" : ""), contents, ...sections);
  list.dataset.state = "ready";
}

main().catch((error) => {
  const list = document.getElementById("endpoints");
  list.textContent = `could not read /openapi.json: ${error.message}`;
  list.dataset.state = "failed";
});
