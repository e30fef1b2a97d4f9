// The API reference, drawn from the server's own /openapi.json: every path, what it takes and what it
// answers. Served from the package itself, so it works offline and under the page's CSP.
"use strict";

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function resolve(schema, spec) {
  if (schema && schema.$ref) return spec.components.schemas[schema.$ref.split("/").pop()];
  return schema || {};
}

function typeOf(schema, spec) {
  schema = resolve(schema, spec);
  if (schema.anyOf) return schema.anyOf.map((s) => typeOf(s, spec)).join(" | ");
  if (schema.type === "array") return `${typeOf(schema.items, spec)}[]`;
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  return schema.type || schema.title || "any";
}

function fields(schema, spec) {
  schema = resolve(schema, spec);
  const table = element("table", undefined, "fields");
  for (const [name, property] of Object.entries(schema.properties || {})) {
    const row = table.insertRow();
    const required = (schema.required || []).includes(name);
    row.insertCell().append(element("code", name + (required ? "" : "?")));
    row.insertCell().append(element("code", typeOf(property, spec)));
    const shown = resolve(property, spec);
    const notes = [shown.description || property.description || ""];
    if (property.default !== undefined) notes.push(`default ${JSON.stringify(property.default)}`);
    row.insertCell().textContent = notes.filter(Boolean).join("; ");
  }
  return table;
}

async function main() {
  const spec = await (await fetch("openapi.json")).json();
  const list = document.getElementById("endpoints");
  list.replaceChildren(element("p", spec.info.description || ""));
  for (const [path, operations] of Object.entries(spec.paths)) {
    for (const [verb, operation] of Object.entries(operations)) {
      const section = element("section", undefined, "endpoint");
      section.append(element("h2", `${verb.toUpperCase()} ${path}`));
      if (operation.description) section.append(element("p", operation.description));
      const body = operation.requestBody?.content?.["application/json"]?.schema;
      if (body) section.append(element("h3", "JSON body"), fields(body, spec));
      const answers = Object.entries(operation.responses || {}).map(([code, r]) => `${code} ${r.description}`);
      section.append(element("p", `answers: ${answers.join(" · ")}`, "answers"));
      list.append(section);
    }
  }
}

main().catch((error) => {
  document.getElementById("endpoints").textContent = `could not read /openapi.json: ${error.message}`;
});
