// Flagstaff console, team pages: members and roles, the cohort editor, static cohorts from a
// CSV file, project settings. Every change is a call of the documented management API with the
// session cookie and the CSRF header (console.js's api()); nothing runs inline (CSP).
"use strict";

(() => {
  const shared = window.flagstaff;
  if (!shared) return;
  const { api, showErrors, builder } = shared;
  const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content || "";
  const csrfToken = meta("csrf-token");
  const apiBase = `/api/projects/${meta("project-id") || "@current"}`;
  const said = (error) => (error.attr ? `${error.attr}: ${error.message}` : error.message);
  const named = (form, name) => form.querySelector(`[name="${name}"]`);

  // A multipart form (a CSV upload) to the management API, answered like api().
  async function sendForm(method, path, data) {
    const response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRF-Token": csrfToken },
      body: data,
    });
    const text = await response.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = { detail: text };
    }
    if (!response.ok) {
      const error = new Error((body && body.detail) || `The server answered ${response.status}`);
      error.attr = body && body.attr;
      throw error;
    }
    return body;
  }

  // ---- members ---------------------------------------------------------------------------

  function setUpAddMember(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const email = named(form, "email").value.trim();
      const password = named(form, "password").value;
      if (!email) {
        showErrors(["Email: a member needs an email."]);
        return;
      }
      const body = { email, role: named(form, "role").value };
      if (password) body.password = password;
      try {
        await api("POST", `${apiBase}/members/`, body);
        window.location.reload();
      } catch (error) {
        showErrors([said(error)]);
      }
    });
  }

  function setUpMemberRole(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api("PATCH", `${apiBase}/members/${form.dataset.userId}/`, {
          role: named(form, "role").value,
        });
        window.location.reload();
      } catch (error) {
        showErrors([said(error)]);
      }
    });
  }

  // ---- cohorts ---------------------------------------------------------------------------

  function serializeCohort(form) {
    const errors = [];
    const body = {
      name: named(form, "name").value.trim(),
      description: named(form, "description").value,
    };
    if (!body.name) errors.push("Name: a cohort needs a name.");
    const conditions = form.querySelector("[data-conditions]");
    const raw = named(form, "filters_json");
    if (conditions) {
      const sets = [...conditions.querySelectorAll(":scope > [data-condition]")].map((c) => {
        const values = [];
        c.querySelectorAll("[data-filters] > [data-filter]").forEach((filter) => {
          try {
            values.push(builder.serializeFilter(filter));
          } catch (error) {
            errors.push(`${filter.querySelector("legend").textContent}: ${error.message}`);
          }
        });
        return { type: "AND", values };
      });
      body.filters = { properties: { type: "OR", values: sets } };
    } else if (raw) {
      const problem = builder.checkJson(raw);
      if (problem) errors.push(`Filters: ${problem}`);
      else body.filters = { properties: JSON.parse(raw.value) };
    }
    return { body, errors };
  }

  function setUpCohortEditor(form) {
    form.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      if (!button || !form.contains(button)) return;
      const action = button.dataset.action;
      if (action === "add-condition") {
        form.querySelector("[data-conditions]").append(builder.cloneTemplate("condition"));
      } else if (action === "add-filter") {
        const row = builder.cloneTemplate("filter");
        button.closest("[data-condition]").querySelector("[data-filters]").append(row);
        builder.showFilterKind(row);
        row.querySelector('[data-field="key"]').focus();
      } else if (action === "remove-filter") {
        button.closest("[data-filter]").remove();
      } else if (action === "remove-condition") {
        button.closest("[data-condition]").remove();
      } else if (action === "delete-cohort") {
        if (!window.confirm("Delete this cohort? Flags that target it stop matching.")) return;
        try {
          await api("DELETE", `${apiBase}/cohorts/${button.dataset.cohortId}/`);
          window.location.assign("/cohorts");
        } catch (error) {
          showErrors([said(error)]);
        }
        return;
      } else {
        return;
      }
      builder.renumber(form);
    });
    form.addEventListener("change", (event) => {
      if (event.target.matches('[data-field="type"]')) {
        builder.showFilterKind(event.target.closest("[data-filter]"));
      }
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const { body, errors } = serializeCohort(form);
      if (errors.length) {
        showErrors(errors);
        return;
      }
      const id = form.dataset.cohortId;
      try {
        const saved = id
          ? await api("PATCH", `${apiBase}/cohorts/${id}/`, body)
          : await api("POST", `${apiBase}/cohorts/`, body);
        showErrors([]);
        window.location.assign(`/cohorts/${saved.id}`);
      } catch (error) {
        showErrors([said(error)]);
      }
    });
    form.querySelectorAll("[data-filter]").forEach(builder.showFilterKind);
  }

  function setUpCohortUpload(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const file = named(form, "csv").files[0];
      const nameField = named(form, "name");
      const errors = [];
      if (nameField && !nameField.value.trim()) errors.push("Name: a cohort needs a name.");
      if (!file) errors.push("CSV file of distinct ids: choose a file.");
      if (errors.length) {
        showErrors(errors);
        return;
      }
      const data = new FormData();
      data.append("is_static", "true");
      if (nameField) data.append("name", nameField.value.trim());
      data.append("csv", file, file.name);
      const id = form.dataset.cohortId;
      try {
        const saved = id
          ? await sendForm("PATCH", `${apiBase}/cohorts/${id}/`, data)
          : await sendForm("POST", `${apiBase}/cohorts/`, data);
        showErrors([]);
        window.location.assign(`/cohorts/${saved.id}`);
      } catch (error) {
        showErrors([said(error)]);
      }
    });
  }

  // ---- project settings ------------------------------------------------------------------

  function setUpRename(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api("PATCH", `${apiBase}/`, { name: named(form, "name").value.trim() });
        window.location.reload();
      } catch (error) {
        showErrors([said(error)]);
      }
    });
  }

  function setUpRetention(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const raw = named(form, "event_retention_days").value.trim();
      const days = raw === "" ? null : Number(raw);
      if (days !== null && (!Number.isInteger(days) || days < 1)) {
        showErrors(["Event retention: a whole number of days (at least 1), or empty to keep events forever."]);
        return;
      }
      if (days !== null && !window.confirm(`Delete events older than ${days} days? This cannot be undone.`)) return;
      try {
        await api("PATCH", `${apiBase}/`, { event_retention_days: days });
        window.location.reload();
      } catch (error) {
        showErrors([said(error)]);
      }
    });
  }

  function setUpStatsDefaults(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const checked = (name) => named(form, name).checked;
      const defaults = {
        sequential: checked("sequential"),
        cuped: checked("cuped"),
        cuped_lookback_days: Number(named(form, "cuped_lookback_days").value) || 14,
        multiple_testing_correction: named(form, "multiple_testing_correction").value,
        auto_stop: checked("auto_stop"),
      };
      const method = named(form, "method").value;
      if (method) defaults.method = method;
      try {
        await api("PATCH", `${apiBase}/`, { experiment_stats_defaults: defaults });
        window.location.reload();
      } catch (error) {
        showErrors([said(error)]);
      }
    });
  }

  document.addEventListener("click", async (event) => {
    const remove = event.target.closest('button[data-action="remove-member"]');
    if (remove) {
      if (!window.confirm(`Remove ${remove.dataset.email} from this project?`)) return;
      try {
        await api("DELETE", `${apiBase}/members/${remove.dataset.userId}/`);
        window.location.reload();
      } catch (error) {
        showErrors([said(error)]);
      }
      return;
    }
    const end = event.target.closest('button[data-action="end-sessions"]');
    if (end) {
      if (!window.confirm(`Log ${end.dataset.email} out everywhere now?`)) return;
      try {
        const done = await api("POST", `${apiBase}/members/${end.dataset.userId}/end_sessions/`);
        const note = document.createElement("span");
        note.setAttribute("role", "status");
        note.textContent = `${done.ended_sessions} session(s) of ${end.dataset.email} ended`;
        end.replaceWith(note);
      } catch (error) {
        showErrors([said(error)]);
      }
      return;
    }
    const copy = event.target.closest('button[data-action="copy"]');
    if (copy) {
      const source = document.querySelector(`[data-copy-source="${copy.dataset.copyTarget}"]`);
      const status = document.querySelector("[data-copy-status]");
      source.select();
      try {
        await navigator.clipboard.writeText(source.value);
        if (status) status.textContent = "Copied.";
      } catch {
        if (status) status.textContent = "Selected: press Ctrl+C (or Cmd+C) to copy.";
      }
    }
  });

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-add-member]").forEach(setUpAddMember);
    document.querySelectorAll("form[data-member-role]").forEach(setUpMemberRole);
    document.querySelectorAll("form[data-cohort-editor]").forEach(setUpCohortEditor);
    document.querySelectorAll("form[data-cohort-upload]").forEach(setUpCohortUpload);
    document.querySelectorAll("form[data-rename-project]").forEach(setUpRename);
    document.querySelectorAll("form[data-event-retention]").forEach(setUpRetention);
    document.querySelectorAll("form[data-stats-defaults]").forEach(setUpStatsDefaults);
  });
})();
