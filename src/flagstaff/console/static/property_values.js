// Flagstaff console: values seen for a property in the property filters (flag and cohort
// editors), offered through a <datalist> on each filter's "Values seen" box. Values come from the documented
// management API (persons/values, groups/property_values: PostHog's [{name, count}]) through
// console.js's window.flagstaff.api. Choosing one sets the filter's value (or adds a line to a
// list). No third-party code; nothing inline (the CSP forbids it).
"use strict";

(() => {
  const LIST_OPERATORS = new Set(["exact", "is_not", "icontains_multi", "not_icontains_multi"]);
  const DEBOUNCE_MS = 250;
  const projectId = document.querySelector('meta[name="project-id"]')?.content || "@current";
  const apiBase = `/api/projects/${projectId}`;
  let lists = 0;

  const field = (root, name) => root.querySelector(`[data-field="${name}"]`);

  function query(filter, typed) {
    const key = field(filter, "key").value.trim();
    if (!key) return null;
    const params = new URLSearchParams({ key });
    if (typed) params.set("value", typed);
    if (field(filter, "type").value === "group") {
      const index = field(filter, "group_type_index").value;
      if (index === "") return null;
      params.set("group_type_index", index);
      return `${apiBase}/groups/property_values/?${params}`;
    }
    return `${apiBase}/persons/values/?${params}`;
  }

  async function suggest(filter, input) {
    const url = query(filter, input.value.trim());
    if (!url || url === input.dataset.asked) return;
    input.dataset.asked = url;
    let values = [];
    try {
      values = await window.flagstaff.api("GET", url);
    } catch {
      values = [];
    }
    if (input.dataset.asked !== url) return; // a newer question was asked meanwhile
    let list = document.getElementById(input.getAttribute("list") || "");
    if (!list) {
      lists += 1;
      list = document.createElement("datalist");
      list.id = `property-values-${lists}`;
      input.after(list);
      input.setAttribute("list", list.id);
    }
    list.replaceChildren(
      ...values.map((v) => {
        const option = document.createElement("option");
        option.value = v.name;
        option.label = `${v.name} (${v.count})`;
        return option;
      }),
    );
    input.dataset.count = String(values.length);
  }

  function use(filter, input) {
    const chosen = input.value.trim();
    if (!chosen) return;
    const value = field(filter, "value");
    if (LIST_OPERATORS.has(field(filter, "operator").value) && value.value.trim()) {
      const lines = value.value.split("\n").map((s) => s.trim());
      if (!lines.includes(chosen)) value.value = `${value.value.replace(/\s+$/, "")}\n${chosen}`;
    } else {
      value.value = chosen;
    }
    input.value = "";
    value.dispatchEvent(new Event("input", { bubbles: true }));
  }

  function setUp(root) {
    const timers = new WeakMap();
    root.addEventListener("focusin", (event) => {
      const input = event.target.closest("[data-value-suggestions]");
      if (input) suggest(input.closest("[data-filter]"), input);
    });
    root.addEventListener("input", (event) => {
      const input = event.target.closest("[data-value-suggestions]");
      if (!input) return;
      if (event.inputType === "insertReplacementText" || !event.inputType) {
        use(input.closest("[data-filter]"), input); // chosen from the list
        return;
      }
      window.clearTimeout(timers.get(input));
      timers.set(
        input,
        window.setTimeout(() => suggest(input.closest("[data-filter]"), input), DEBOUNCE_MS),
      );
    });
    root.addEventListener("change", (event) => {
      const input = event.target.closest("[data-value-suggestions]");
      if (input) use(input.closest("[data-filter]"), input);
    });
  }

  setUp(document); // filters come and go (templates): listen once, for every one
})();
