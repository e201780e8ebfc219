// The Query page: Ctrl+Enter (Cmd+Enter on a Mac) runs the statement, from the editor too; the
// editor completes the chosen warehouse's namespaces, tables and columns.
(function () {
  "use strict";
  // Listening in the capture phase, before the code editor takes the key as its own.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    var form = event.target.closest && event.target.closest("form[data-run-on-ctrl-enter]");
    if (!form) return;
    event.preventDefault();
    event.stopPropagation();
    form.requestSubmit();
  }, true);

  // --- Completion: the warehouse's outline, from the console's completion endpoint
  // (app/console/completions.py, kept a while by the portal); fetched once per warehouse on this
  // page, again when the user refreshes it. The editor (static/vendor/editor.js) takes it as the
  // detail of a "lakeport:sql-schema" event on the statement's textarea.
  var outlines = {}; // completion URL -> the endpoint's answer

  function parts(form) {
    var select = form.querySelector("select[name='warehouse_id']");
    var option = select && select.selectedOptions[0];
    return {
      url: option ? option.dataset.completions : "",
      textarea: form.querySelector("textarea[name='sql-code']"),
      status: form.querySelector("[data-completion-status]"),
      refresh: form.querySelector("[data-refresh-completions]"),
    };
  }

  function show(form, url, answer) {
    var found = parts(form);
    if (found.url !== url) return; // the user chose another warehouse meanwhile
    if (found.status) found.status.textContent = answer.status;
    if (found.textarea) {
      found.textarea.sqlSchema = answer.schema || undefined;
      found.textarea.dispatchEvent(
        new CustomEvent("lakeport:sql-schema", { detail: answer.schema || null })
      );
    }
  }

  function load(form, refresh) {
    var found = parts(form);
    if (!found.url) return;
    if (found.refresh) found.refresh.hidden = false;
    var url = found.url;
    if (!refresh && outlines[url]) {
      show(form, url, outlines[url]);
      return;
    }
    if (found.status) found.status.textContent = "Reading the warehouse's tables for completion…";
    if (found.refresh) found.refresh.setAttribute("aria-busy", "true");
    fetch(url + (refresh ? "?refresh=1" : ""), {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    })
      .then(function (response) {
        if (!response.ok) throw new Error("answered " + response.status);
        return response.json();
      })
      .then(function (answer) {
        if (!answer.error) outlines[url] = answer;
        show(form, url, answer);
      })
      .catch(function (error) {
        show(form, url, { status: "No completion of this warehouse's tables: " + error.message + ".", schema: null });
      })
      .finally(function () {
        var now = parts(form);
        if (now.refresh) now.refresh.removeAttribute("aria-busy");
      });
  }

  function setUp(root) {
    var forms = root.matches && root.matches("form[data-completions]")
      ? [root]
      : root.querySelectorAll("form[data-completions]");
    forms.forEach(function (form) {
      if (form.dataset.completionsReady) return;
      form.dataset.completionsReady = "true";
      var select = form.querySelector("select[name='warehouse_id']");
      if (select) select.addEventListener("change", function () { load(form, false); });
      var refresh = form.querySelector("[data-refresh-completions]");
      if (refresh) refresh.addEventListener("click", function () { load(form, true); });
      load(form, false);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { setUp(document); });
  // A refused query swaps the form in again.
  document.addEventListener("htmx:load", function (event) { setUp(event.detail.elt); });
})();
