// Flagstaff console: forms that call the documented management API with the session cookie
// and the CSRF header. No third-party code; nothing runs inline (the CSP forbids it).
"use strict";

(() => {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content || "";
  const csrfToken = meta("csrf-token");
  const projectId = meta("project-id");
  const apiBase = `/api/projects/${projectId || "@current"}`;

  async function api(method, path, body) {
    const response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: {
        Accept: "application/json",
        "Content-Type": "application/json",
        "X-CSRF-Token": csrfToken,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = { detail: text };
      }
    }
    if (!response.ok) {
      const error = new Error((data && data.detail) || `The server answered ${response.status}`);
      error.status = response.status;
      error.attr = data && data.attr;
      throw error;
    }
    return data;
  }

  // A write the project's approval policy held: the API answered 202 with a change request.
  const isChangeRequest = (data) =>
    Boolean(data && data.status === "pending" && typeof data.kind === "string" && "base_version" in data);

  function showHeld(request) {
    showErrors([]);
    const box = document.querySelector("[data-note]");
    if (!box) return;
    const text = document.createElement("p");
    text.textContent =
      `Saved as change request ${request.id}: it goes live once someone else approves it. `;
    const link = document.createElement("a");
    link.href = "/approvals";
    link.textContent = "See the requests waiting for approval";
    text.append(link);
    box.replaceChildren(text);
    box.hidden = false;
    box.scrollIntoView({ block: "nearest" });
  }

  function showErrors(messages) {
    const box = document.querySelector("[data-errors]");
    if (!box) return;
    box.replaceChildren();
    if (!messages.length) {
      box.hidden = true;
      return;
    }
    const list = document.createElement("ul");
    for (const message of messages) {
      const item = document.createElement("li");
      item.textContent = message;
      list.append(item);
    }
    box.append(list);
    box.hidden = false;
    box.scrollIntoView({ block: "nearest" });
  }

  // ---- the flag editor ------------------------------------------------------------------

  const LIST_OPERATORS = new Set(["exact", "is_not", "icontains_multi", "not_icontains_multi"]);
  const NUMBER_OPERATORS = new Set(["gt", "gte", "lt", "lte"]);
  const RANGE_OPERATORS = new Set(["between", "not_between"]);
  const SET_OPERATORS = new Set(["is_set", "is_not_set"]);

  const field = (root, name) => root.querySelector(`[data-field="${name}"]`);
  const named = (form, name) => form.querySelector(`[name="${name}"]`);
  const splitList = (text) =>
    text.split(",").map((s) => s.trim()).filter((s) => s.length > 0);
  const lines = (text) =>
    text.split("\n").map((s) => s.trim()).filter((s) => s.length > 0);

  function setText(el, values) {
    el.textContent = el.dataset.text.replace(/\{(\w)\}/g, (_, name) => String(values[name]));
  }

  function renumber(form) {
    form.querySelectorAll("[data-conditions] > [data-condition]").forEach((condition, c) => {
      condition.querySelectorAll(":scope > [data-text]").forEach((el) => setText(el, { c: c + 1 }));
      condition.querySelectorAll("[data-filters] > [data-filter]").forEach((filter, f) => {
        filter.querySelectorAll(":scope > [data-text]").forEach((el) =>
          setText(el, { c: c + 1, f: f + 1 }),
        );
      });
    });
    form.querySelectorAll("[data-variants] > [data-variant]").forEach((variant, v) => {
      variant.querySelectorAll(":scope > [data-text]").forEach((el) => setText(el, { v: v + 1 }));
    });
  }

  function showFilterKind(filter) {
    const kind = field(filter, "type").value;
    filter.querySelectorAll("[data-when]").forEach((el) => {
      el.hidden = !el.dataset.when.split(" ").includes(kind);
    });
  }

  function variantKeys(form) {
    return [...form.querySelectorAll("[data-variants] > [data-variant]")]
      .map((v) => field(v, "key").value.trim())
      .filter((k) => k.length > 0);
  }

  function refreshVariants(form) {
    const keys = variantKeys(form);
    form.querySelectorAll("[data-variant-choices]").forEach((select) => {
      const chosen = select.value;
      select.replaceChildren(new Option("No override", ""));
      for (const key of keys) select.append(new Option(key, key, false, key === chosen));
      if (chosen && !keys.includes(chosen)) select.append(new Option(chosen, chosen, false, true));
    });
    const total = [...form.querySelectorAll("[data-variants] > [data-variant]")]
      .map((v) => Number(field(v, "rollout_percentage").value || 0))
      .reduce((a, b) => a + b, 0);
    const output = form.querySelector("[data-split-total]");
    if (output) output.textContent = String(Math.round(total * 100) / 100);
    const booleanPayload = form.querySelector("[data-boolean-payload]");
    if (booleanPayload) booleanPayload.hidden = keys.length > 0;
  }

  function checkJson(textarea) {
    const text = textarea.value.trim();
    let message = "";
    if (text) {
      try {
        JSON.parse(text);
      } catch (error) {
        message = `Not valid JSON: ${error.message}`;
      }
    }
    textarea.setCustomValidity(message);
    textarea.setAttribute("aria-invalid", message ? "true" : "false");
    let note = textarea.parentElement.querySelector(".field-error");
    if (message && !note) {
      note = document.createElement("span");
      note.className = "field-error";
      note.setAttribute("role", "alert");
      textarea.parentElement.append(note);
    }
    if (note) note.textContent = message;
    return message;
  }

  function filterValue(operator, text) {
    if (SET_OPERATORS.has(operator)) return operator;
    if (LIST_OPERATORS.has(operator)) return lines(text);
    if (RANGE_OPERATORS.has(operator)) {
      const parts = text.includes("[") ? JSON.parse(text) : text.split(/[,\n]/).map((s) => s.trim());
      return parts.map((p) => (p === "" || isNaN(Number(p)) ? p : Number(p)));
    }
    const single = text.trim();
    if (NUMBER_OPERATORS.has(operator) && single !== "" && !isNaN(Number(single))) {
      return Number(single);
    }
    return single;
  }

  function serializeFilter(filter) {
    const kind = field(filter, "type").value;
    if (kind === "cohort") {
      const id = field(filter, "cohort_id").value;
      return {
        key: "id",
        type: "cohort",
        operator: field(filter, "cohort_operator").value,
        value: /^\d+$/.test(id) ? Number(id) : id,
      };
    }
    if (kind === "flag") {
      const raw = field(filter, "flag_value").value.trim();
      return {
        key: field(filter, "flag_id").value,
        type: "flag",
        operator: field(filter, "flag_operator").value,
        value: raw === "true" ? true : raw === "false" ? false : raw,
      };
    }
    const operator = field(filter, "operator").value;
    const result = {
      key: field(filter, "key").value.trim(),
      type: kind,
      operator,
      value: filterValue(operator, field(filter, "value").value),
    };
    if (kind === "group") {
      const index = field(filter, "group_type_index").value;
      result.group_type_index = index === "" ? null : Number(index);
    }
    return result;
  }

  const numberOrNull = (text) => (text.trim() === "" ? null : Number(text));

  function serializeFlag(form) {
    const errors = [];
    form.querySelectorAll("[data-json]").forEach((textarea) => {
      if (textarea.closest("[hidden]")) return;
      const message = checkJson(textarea);
      if (message) errors.push(`${textarea.parentElement.firstChild.textContent.trim()}: ${message}`);
    });
    const variants = [...form.querySelectorAll("[data-variants] > [data-variant]")].map((v) => ({
      key: field(v, "key").value.trim(),
      name: field(v, "name").value,
      rollout_percentage: numberOrNull(field(v, "rollout_percentage").value) ?? 0,
      payload: field(v, "payload").value.trim(),
    }));
    const groups = [...form.querySelectorAll("[data-conditions] > [data-condition]")].map((c) => {
      const properties = [];
      c.querySelectorAll("[data-filters] > [data-filter]").forEach((filter) => {
        try {
          properties.push(serializeFilter(filter));
        } catch (error) {
          errors.push(`${filter.querySelector("legend").textContent}: ${error.message}`);
        }
      });
      return {
        properties,
        rollout_percentage: numberOrNull(field(c, "rollout_percentage").value),
        variant: field(c, "variant").value || null,
      };
    });
    const payloads = {};
    if (variants.length) {
      for (const v of variants) if (v.payload) payloads[v.key] = v.payload;
      const total = variants.reduce((sum, v) => sum + v.rollout_percentage, 0);
      if (Math.abs(total - 100) > 1e-9) errors.push(`Variant splits add up to ${total}%, not 100%.`);
    } else if (named(form, "boolean_payload").value.trim()) {
      payloads["true"] = named(form, "boolean_payload").value.trim();
    }
    const aggregation = named(form, "aggregation_group_type_index").value;
    const holdoutId = named(form, "holdout_id").value.trim();
    const filters = {
      groups,
      multivariate: variants.length
        ? { variants: variants.map(({ key, name, rollout_percentage }) => ({ key, name, rollout_percentage })) }
        : null,
      payloads,
      aggregation_group_type_index: aggregation === "" ? null : Number(aggregation),
      holdout: holdoutId
        ? {
            id: Number(holdoutId),
            exclusion_percentage: numberOrNull(named(form, "holdout_exclusion").value) ?? 0,
          }
        : null,
    };
    const body = {
      key: named(form, "key").value.trim(),
      name: named(form, "name").value,
      active: named(form, "active").checked,
      tags: splitList(named(form, "tags").value),
      filters,
      evaluation_runtime: named(form, "evaluation_runtime").value,
      evaluation_contexts: splitList(named(form, "evaluation_contexts").value),
      ensure_experience_continuity: named(form, "ensure_experience_continuity").checked,
      bucketing_identifier: named(form, "bucketing_identifier").value,
    };
    if (!body.key) errors.push("Key: a flag needs a key.");
    if (form.dataset.flagVersion) body.version = Number(form.dataset.flagVersion);
    return { body, errors };
  }

  function cloneTemplate(name) {
    const template = document.querySelector(`template[data-template="${name}"]`);
    return template.content.firstElementChild.cloneNode(true);
  }

  function setUpEditor(form) {
    form.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      if (!button || !form.contains(button)) return;
      const action = button.dataset.action;
      if (action === "add-condition") {
        const block = cloneTemplate("condition");
        form.querySelector("[data-conditions]").append(block);
        refreshVariants(form);
      } else if (action === "add-filter") {
        const row = cloneTemplate("filter");
        button.closest("[data-condition]").querySelector("[data-filters]").append(row);
        showFilterKind(row);
        field(row, "key").focus();
      } else if (action === "add-variant") {
        form.querySelector("[data-variants]").append(cloneTemplate("variant"));
      } else if (action === "remove-filter") {
        button.closest("[data-filter]").remove();
      } else if (action === "remove-condition") {
        button.closest("[data-condition]").remove();
      } else if (action === "remove-variant") {
        button.closest("[data-variant]").remove();
      } else if (action === "delete-flag") {
        if (!window.confirm("Delete this feature flag?")) return;
        try {
          const held = await api("DELETE", `${apiBase}/feature_flags/${form.dataset.flagId}/`);
          if (isChangeRequest(held)) {
            showHeld(held);
            return;
          }
          window.location.assign("/feature_flags");
        } catch (error) {
          showErrors([error.message]);
        }
        return;
      }
      renumber(form);
      refreshVariants(form);
    });
    form.addEventListener("change", (event) => {
      if (event.target.matches('[data-field="type"]')) showFilterKind(event.target.closest("[data-filter]"));
      if (event.target.closest("[data-variant]")) refreshVariants(form);
    });
    form.addEventListener("input", (event) => {
      if (event.target.matches("[data-json]")) checkJson(event.target);
      if (event.target.closest("[data-variant]")) refreshVariants(form);
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const { body, errors } = serializeFlag(form);
      if (errors.length) {
        showErrors(errors);
        return;
      }
      const id = form.dataset.flagId;
      try {
        const saved = id
          ? await api("PATCH", `${apiBase}/feature_flags/${id}/`, body)
          : await api("POST", `${apiBase}/feature_flags/`, body);
        if (isChangeRequest(saved)) {
          showHeld(saved);
          return;
        }
        showErrors([]);
        window.location.assign(`/feature_flags/${saved.id}`);
      } catch (error) {
        showErrors([error.attr ? `${error.attr}: ${error.message}` : error.message]);
      }
    });
    form.querySelectorAll("[data-filter]").forEach(showFilterKind);
    refreshVariants(form);
  }

  // ---- a flag's history: one-click rollback ---------------------------------------------

  function setUpHistory(list) {
    list.addEventListener("click", async (event) => {
      const button = event.target.closest('button[data-action="rollback"]');
      if (!button) return;
      const version = Number(button.dataset.version);
      if (!window.confirm(`Roll the flag back to version ${version}?`)) return;
      try {
        const done = await api("POST", `${apiBase}/feature_flags/${list.dataset.flagId}/rollback/`, {
          version,
        });
        if (isChangeRequest(done)) {
          showHeld(done);
          return;
        }
        window.location.reload();
      } catch (error) {
        showErrors([error.message]);
      }
    });
  }

  // ---- personal API keys: create (shown once) and revoke ----------------------------------

  function setUpKeys(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const label = form.querySelector('[name="label"]').value.trim();
      if (!label) {
        showErrors(["Key label: a key needs a label."]);
        return;
      }
      try {
        const created = await api("POST", "/api/personal_api_keys/", { label });
        const box = document.querySelector("[data-new-key]");
        box.querySelector("[data-new-key-value]").value = created.value;
        box.hidden = false;
        box.querySelector("[data-new-key-value]").select();
        showErrors([]);
      } catch (error) {
        showErrors([error.message]);
      }
    });
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest('button[data-action="revoke-key"]');
    if (!button) return;
    if (!window.confirm("Revoke this key? Requests using it will be refused at once.")) return;
    try {
      await api("DELETE", `/api/personal_api_keys/${button.dataset.keyId}/`);
      window.location.reload();
    } catch (error) {
      showErrors([error.message]);
    }
  });

  // ---- live events: poll the events API, newest first ------------------------------------

  const LIVE_POLL_MS = 1000;
  const LIVE_ROWS = 100;

  function eventSummary(properties) {
    if (properties && properties.$current_url) return String(properties.$current_url);
    const shown = Object.entries(properties || {})
      .filter(([k]) => !k.startsWith("$"))
      .slice(0, 4)
      .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`);
    return shown.join(", ");
  }

  function setUpLiveEvents(table) {
    const body = table.tBodies[0];
    const status = document.querySelector("[data-live-status]");
    const params = new URLSearchParams(window.location.search);
    const query = new URLSearchParams({ limit: String(LIVE_ROWS) });
    for (const name of ["event", "distinct_id"]) {
      if (params.get(name)) query.set(name, params.get(name));
    }
    async function poll() {
      try {
        const page = await api("GET", `${apiBase}/events/?${query}`);
        const rows = page.results.map((e) => {
          const row = document.createElement("tr");
          row.dataset.eventUuid = e.uuid;
          for (const text of [e.event, e.distinct_id, e.timestamp, eventSummary(e.properties)]) {
            const cell = document.createElement("td");
            cell.textContent = text;
            row.append(cell);
          }
          return row;
        });
        if (rows.length) body.replaceChildren(...rows);
        if (status) status.textContent = `Newest first; updated ${new Date().toLocaleTimeString()}.`;
      } catch (error) {
        if (status) status.textContent = `Could not load events: ${error.message}`;
      } finally {
        window.setTimeout(poll, LIVE_POLL_MS);
      }
    }
    window.setTimeout(poll, LIVE_POLL_MS);
  }

  // ---- scheduled changes: create through the API, cancel ---------------------------------

  function setUpSchedule(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const choice = data.get("operation");
      const when = new Date(String(data.get("when")));
      let payload;
      if (choice === "rollout") {
        const raw = String(data.get("rollout") || "");
        if (raw === "") {
          showErrors(["Rollout percentage: give a number from 0 to 100."]);
          return;
        }
        payload = { operation: "update_rollout", value: Number(raw) };
      } else {
        payload = { operation: "update_status", value: choice === "on" };
      }
      if (Number.isNaN(when.getTime())) {
        showErrors(["When: choose a date and time."]);
        return;
      }
      try {
        const made = await api("POST", `${apiBase}/scheduled_changes/`, {
          record_id: Number(form.dataset.flagId),
          model_name: "FeatureFlag",
          payload,
          scheduled_at: when.toISOString(),
        });
        if (isChangeRequest(made)) {
          showHeld(made);
          return;
        }
        window.location.reload();
      } catch (error) {
        showErrors([error.message]);
      }
    });
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest('button[data-action="cancel-scheduled"]');
    if (!button) return;
    try {
      await api("DELETE", `${apiBase}/scheduled_changes/${button.dataset.changeId}/`);
      window.location.reload();
    } catch (error) {
      showErrors([error.message]);
    }
  });

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-schedule-change]").forEach(setUpSchedule);
    document.querySelectorAll("table[data-live-events]").forEach(setUpLiveEvents);
    document.querySelectorAll("form[data-create-key]").forEach(setUpKeys);
    document.querySelectorAll("form[data-flag-editor]").forEach(setUpEditor);
    document.querySelectorAll("[data-flag-history]").forEach(setUpHistory);
  });

  // The builder's pieces, shared with team.js (the cohort editor).
  window.flagstaff = {
    api,
    showErrors,
    isChangeRequest,
    showHeld,
    builder: { serializeFilter, renumber, showFilterKind, cloneTemplate, checkJson },
  };
})();
