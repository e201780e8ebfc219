// The workflow editor's code fields: CodeMirror 6 over each step's <textarea class="code">.
// Progressive enhancement: the textarea stays in the form (hidden) and receives every edit,
// so the form posts it and the inline checks (htmx, on the textarea's input event) still run.
// Bundled by esbuild at setup (`npm run build`) into app/static/vendor/editor.js.
import { EditorView, basicSetup } from "codemirror";
import { Compartment } from "@codemirror/state";
import { syntaxHighlighting } from "@codemirror/language";
import { classHighlighter } from "@lezer/highlight";
import { sql, SQLDialect } from "@codemirror/lang-sql";
import { python } from "@codemirror/lang-python";

// CodeMirror adds its styles in a <style> element: the page's CSP allows it by the nonce the
// page gives this script (<script data-style-nonce>), which the response's CSP header names.
const styleNonce = (document.currentScript && document.currentScript.dataset.styleNonce) || "";

// Spark SQL quotes identifiers with backticks.
const sparkSql = SQLDialect.define({ identifierQuotes: "`" });

// `schema`: a warehouse's namespaces, tables and columns (CodeMirror's SQLNamespace, as the
// Query page's completion endpoint serves it, app/console/completions.py), or none.
function languageFor(kind, schema) {
  if (kind === "python") return python();
  if (!schema) return sql({ dialect: sparkSql });
  return [
    sql({ dialect: sparkSql, schema }),
    sparkSql.language.data.of({ autocomplete: namedTableColumns(schema) }),
  ];
}

// A table named in the statement (`ns.table`, backticks or not) lends its columns to unqualified
// names: `SELECT l_ret| FROM tpch.lineitem` completes l_returnflag. Qualified names (`x.|`) are
// the schema completion's.
const NAMED_TABLE = /`?([A-Za-z_][\w]*)`?\.`?([A-Za-z_][\w]*)`?/g;

function namedTableColumns(schema) {
  return (context) => {
    const word = context.matchBefore(/[\w$]+/);
    if (!word && !context.explicit) return null;
    const from = word ? word.from : context.pos;
    if (/[.`]/.test(context.state.sliceDoc(from - 1, from))) return null;
    const options = [];
    const seen = new Set();
    for (const [, namespace, table] of context.state.doc.toString().matchAll(NAMED_TABLE)) {
      const columns = schema[namespace]?.children?.[table]?.children;
      const name = `${namespace}.${table}`;
      if (!Array.isArray(columns) || seen.has(name)) continue;
      seen.add(name);
      for (const column of columns) {
        options.push({ ...column, detail: `${column.detail} · ${name}`, boost: 1 });
      }
    }
    return options.length ? { from, options, validFor: /^[\w$]*$/ } : null;
  };
}

function enhance(textarea) {
  if (textarea.dataset.enhanced) return;
  textarea.dataset.enhanced = "true";
  const step = textarea.closest("fieldset");
  const kindSelect = step && step.querySelector("select[name$='-kind']");
  const label = textarea.closest("label");
  const language = new Compartment();

  const view = new EditorView({
    doc: textarea.value,
    extensions: [
      basicSetup,
      EditorView.cspNonce.of(styleNonce),
      // Tokens get tok-* classes, coloured by app.css (light and dark, with enough contrast)
      // instead of CodeMirror's default colours, some of which are too faint.
      syntaxHighlighting(classHighlighter),
      language.of(languageFor(kindSelect ? kindSelect.value : "sql", textarea.sqlSchema)),
      EditorView.lineWrapping,
      // Through the facet, not classList: CodeMirror rewrites its root's attributes whenever it
      // is reconfigured (a step's language, the Query page's tables).
      EditorView.editorAttributes.of(
        textarea.getAttribute("aria-invalid")
          ? { class: "code-editor", "aria-invalid": "true" }
          : { class: "code-editor" }
      ),
      EditorView.contentAttributes.of({
        "aria-label": label ? label.firstChild.textContent.trim() : "Code",
        "data-testid": "code-editor",
      }),
      EditorView.updateListener.of((update) => {
        if (!update.docChanged) return;
        textarea.value = update.state.doc.toString();
        textarea.dispatchEvent(new Event("input", { bubbles: true }));
      }),
    ],
  });
  // The label now names the editor; the textarea leaves it so it is not a second "Code" field.
  textarea.hidden = true;
  if (label) label.after(textarea);
  (label || textarea).after(view.dom);
  if (label) label.classList.add("editor-label");

  if (kindSelect) {
    kindSelect.addEventListener("change", () => {
      view.dispatch({ effects: language.reconfigure(languageFor(kindSelect.value)) });
    });
  }
  // The Query page hands the editor its warehouse's tables (app/static/js/console.js): the
  // event's detail is the schema, or null for none.
  textarea.addEventListener("lakeport:sql-schema", (event) => {
    textarea.sqlSchema = event.detail || undefined;
    view.dispatch({ effects: language.reconfigure(languageFor("sql", textarea.sqlSchema)) });
  });
}

function enhanceAll(root) {
  root.querySelectorAll("textarea.code[name$='-code']").forEach(enhance);
}

document.addEventListener("DOMContentLoaded", () => enhanceAll(document));
document.addEventListener("htmx:load", (event) => enhanceAll(event.detail.elt));
