// Lakeport's page behaviour: small progressive enhancements, loaded as a file (the CSP allows no
// inline script). Everything here also works without it, only less conveniently.
(function () {
  "use strict";

  // Buttons with data-fill='{"field": value, ...}' fill the form named by data-fill-form, then
  // let each field's inline validation run again.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-fill-form]");
    if (!button) return;
    var form = document.getElementById(button.dataset.fillForm);
    var values = JSON.parse(button.dataset.fill);
    Object.keys(values).forEach(function (name) {
      var field = form.elements[name];
      if (!field) return;
      if (field.type === "checkbox") field.checked = Boolean(values[name]);
      else field.value = values[name];
      field.removeAttribute("aria-invalid");
      field.dispatchEvent(new Event("input", { bubbles: true }));
      field.dispatchEvent(new Event("change", { bubbles: true }));
    });
  });

  // An inline error swapped in (or cleared) marks its field invalid (or valid) again.
  document.addEventListener("htmx:afterSwap", function (event) {
    var error = event.detail.target;
    if (!error || !error.id || error.id.indexOf("error-") !== 0) return;
    var message = document.getElementById(error.id);
    var field = document.getElementById(error.id.slice("error-".length));
    if (!field || !message) return;
    if (message.textContent.trim()) field.setAttribute("aria-invalid", "true");
    else field.removeAttribute("aria-invalid");
  });

  // After a swap a person asked for (a form sent, a button or link pressed; never a poll), the focus
  // goes to the answer, so a keyboard or screen reader user is not left on a removed element or far
  // from it: a field the answer names for it (autofocus: the first field of an item just added,
  // which htmx would focus too, once settled), else the first alert, else the first invalid field,
  // else a status message, else the new content itself. An outerHTML swap detaches its target: its
  // replacement is found by id.
  var ANSWERS = ["[autofocus]", "[role=alert]", "[aria-invalid=true]", "[role=status], .flash, [data-swap-focus]"];
  function personAsked(detail) {  // a form sent or a control pressed, never a poll
    var config = detail.requestConfig, asked = config && config.triggeringEvent;
    return Boolean(asked && (asked.type === "click" || asked.type === "submit"));
  }
  document.addEventListener("htmx:afterSwap", function (event) {
    if (!personAsked(event.detail)) return;
    var region = event.detail.target;
    if (region && !region.isConnected && region.id) region = document.getElementById(region.id);
    if (!region || !region.isConnected) return;
    var answer = null;
    for (var i = 0; i < ANSWERS.length && !answer; i++) {
      answer = region.matches(ANSWERS[i]) ? region : region.querySelector(ANSWERS[i]);
    }
    answer = answer || region;
    if (answer.tabIndex < 0 && !answer.hasAttribute("tabindex")) answer.setAttribute("tabindex", "-1");
    answer.focus();
  });

  // The top bar's menus (<details class="dropdown">: the navigation folded into "Menu" on a narrow
  // screen, and the user menu) behave as a disclosure menu: Enter or Space on the summary opens it
  // (the browser's own), Escape closes the open one and gives the focus back to its summary, and the
  // focus leaving it (Tab past its last item, even off the page's end, or a click elsewhere) closes
  // it, so an open menu never covers where the focus went. A press inside it (on its e-mail line)
  // keeps it open; so does the window losing the focus, which leaves the focus where it was.
  var pressed = null;
  document.addEventListener("pointerdown", function (event) { pressed = event.target; }, true);
  document.addEventListener("keydown", function (event) {
    pressed = null;
    if (event.key !== "Escape" || !event.target.closest) return;
    var menu = event.target.closest("details.dropdown[open]");
    if (!menu) return;
    event.preventDefault();
    menu.open = false;
    menu.querySelector(":scope > summary").focus();
  }, true);
  document.addEventListener("focusout", function (event) {
    var menu = event.target.closest && event.target.closest("details.dropdown[open]");
    if (!menu) return;
    window.setTimeout(function () {  // once the focus has landed
      var keep = menu.contains(document.activeElement) || (pressed && menu.contains(pressed));
      if (!keep) menu.open = false;
    }, 0);
  });

  // hx-confirm asks in an in-page <dialog> rather than the browser's confirm().
  function confirmDialog(question, onConfirm) {
    var dialog = document.getElementById("confirm-dialog");
    dialog.querySelector("[data-confirm-question]").textContent = question;
    var accept = dialog.querySelector("[data-confirm-accept]");
    var fresh = accept.cloneNode(true);  // drops the previous question's listener
    accept.replaceWith(fresh);
    fresh.addEventListener("click", function () { dialog.close(); onConfirm(); });
    dialog.showModal();
    fresh.focus();
  }

  document.addEventListener("htmx:confirm", function (event) {
    if (!event.detail.question) return;
    event.preventDefault();
    confirmDialog(event.detail.question, function () { event.detail.issueRequest(true); });
  });

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-confirm-cancel]")) {
      event.target.closest("dialog").close();
    }
  });

  // While the dialog asks, the page's self-polling parts wait; once it is answered they poll again.
  // A poll's swap would replace the button that asked (Terminate, Cancel inside a live part), and
  // htmx sends nothing for an element no longer in the page: the confirmed action was lost.
  var heldPolls = [];
  function asking() {
    var dialog = document.getElementById("confirm-dialog");
    return Boolean(dialog && dialog.open);
  }
  function holdPoll(elt, config) {
    if (!config || heldPolls.some(function (poll) { return poll.elt === elt; })) return;
    heldPolls.push({ elt: elt, verb: config.verb, path: config.path });
  }
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (!asking() || personAsked(event.detail)) return;
    event.preventDefault();
    holdPoll(event.detail.elt, event.detail.requestConfig);
  });
  document.addEventListener("htmx:beforeSwap", function (event) {  // a poll already on its way
    if (!asking() || personAsked(event.detail)) return;
    event.detail.shouldSwap = false;
    holdPoll(event.detail.elt, event.detail.requestConfig);
  });
  document.addEventListener("DOMContentLoaded", function () {
    var dialog = document.getElementById("confirm-dialog");
    if (!dialog) return;
    dialog.addEventListener("close", function () {
      heldPolls.splice(0).forEach(function (poll) {
        if (!poll.elt.isConnected) return;
        // A poll that fails says so as any poll does (htmx's error events), not as a rejection.
        htmx.ajax(poll.verb, poll.path, { source: poll.elt }).catch(function () {});
      });
    });
  });

  // Times in the viewer's own time zone: <time datetime="ISO" data-local>.
  function localiseTimes(root) {
    root.querySelectorAll("time[data-local]").forEach(function (element) {
      var when = new Date(element.getAttribute("datetime"));
      if (isNaN(when)) return;
      // data-local="time": the time of day only (log lines); otherwise the date and time.
      var clock = { hour: "2-digit", minute: "2-digit", second: "2-digit" };
      element.textContent = element.dataset.local === "time" ? when.toLocaleTimeString(undefined, clock)
        : when.toLocaleString(undefined, Object.assign({ year: "numeric", month: "2-digit", day: "2-digit" }, clock));
      element.title = when.toISOString();
    });
  }
  document.addEventListener("DOMContentLoaded", function () { localiseTimes(document); });
  document.addEventListener("htmx:load", function (event) { localiseTimes(event.detail.elt); });

  // A running execution's duration ticks here, not in its polls: <dd data-running-since="ISO">,
  // written as the server writes a duration ("12 s", "3 min 07 s", "1 h 02 min").
  function pad(number) { return (number < 10 ? "0" : "") + number; }
  function durationSince(since) {
    var seconds = Math.max(0, Math.floor((Date.now() - since) / 1000));
    var hours = Math.floor(seconds / 3600), minutes = Math.floor(seconds % 3600 / 60);
    if (hours) return hours + " h " + pad(minutes) + " min";
    if (minutes) return minutes + " min " + pad(seconds % 60) + " s";
    return seconds + " s";
  }
  window.setInterval(function () {
    document.querySelectorAll("[data-running-since]").forEach(function (element) {
      var since = new Date(element.dataset.runningSince);
      if (!isNaN(since)) element.textContent = durationSince(since);
    });
  }, 1000);
})();
