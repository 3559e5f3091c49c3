// Quartermaster console: follows the events this person may read (a long
// poll of /live), lists them in the live region, and re-renders the page's
// main content from the server after each change. No markup from an event
// is ever inserted: events are shown as text, pages come from the server.
"use strict";
(function () {
  const body = document.body;
  if (!body || body.dataset.liveSince === undefined) {
    return; // the sign-in page
  }
  let since = Number(body.dataset.liveSince) || 0;
  const list = document.getElementById("live");
  const state = document.getElementById("live-state");
  let failures = 0;

  function say(text) {
    if (state) {
      state.textContent = text;
    }
  }

  function show(change) {
    if (!list) {
      return;
    }
    const item = document.createElement("li");
    const time = new Date(change.at).toISOString().slice(11, 19);
    item.textContent = time + " " + change.queue + "/" + change.share + " " + change.text;
    list.prepend(item);
    while (list.children.length > 30) {
      list.lastElementChild.remove();
    }
  }

  async function refresh(newest) {
    const main = document.getElementById("main");
    if (!main) {
      return;
    }
    // Someone typing in a form keeps what they typed.
    if (main.contains(document.activeElement) &&
        ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName)) {
      say("The page changed: reload to see it.");
      return;
    }
    const answer = await fetch(window.location.href, { credentials: "same-origin" });
    if (!answer.ok) {
      return;
    }
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById("main");
    if (!fresh) {
      return;
    }
    main.replaceChildren(...Array.from(fresh.childNodes).map((n) => document.importNode(n, true)));
    body.dataset.updatedAt = String(Date.now());
    if (newest) {
      body.dataset.lastLatencyMs = String(Date.now() - newest.at);
    }
  }

  // Re-renders at most once every two seconds, and not while the tab is
  // hidden (it catches up when shown): many open pages must not turn a
  // burst of events into a burst of page loads.
  const GAP_MS = 2000;
  let lastRefresh = 0;
  let pending = null;
  let timer = null;

  function soon(newest) {
    pending = newest;
    if (timer !== null || document.hidden) {
      return;
    }
    const wait = Math.max(0, lastRefresh + GAP_MS - Date.now());
    timer = setTimeout(async () => {
      timer = null;
      const change = pending;
      pending = null;
      lastRefresh = Date.now();
      await refresh(change);
    }, wait);
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && pending !== null) {
      soon(pending);
    }
  });

  async function follow() {
    for (;;) {
      try {
        const answer = await fetch("/live?since=" + since, { credentials: "same-origin" });
        if (answer.status === 401 || answer.redirected) {
          say("Live updates stopped: sign in again.");
          return;
        }
        if (!answer.ok) {
          throw new Error("HTTP " + answer.status);
        }
        const news = await answer.json();
        failures = 0;
        since = news.seq;
        body.dataset.liveSeq = String(since);
        if (news.changes.length > 0) {
          news.changes.forEach(show);
          say("Live: last change at " + new Date().toLocaleTimeString() + ".");
          soon(news.changes[news.changes.length - 1]);
        }
      } catch (e) {
        failures += 1;
        say("Live updates interrupted; retrying.");
        await new Promise((r) => setTimeout(r, Math.min(30000, 1000 * 2 ** failures)));
      }
    }
  }

  follow();
})();
