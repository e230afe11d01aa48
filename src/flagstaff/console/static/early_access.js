// Flagstaff console: early access features. Create, edit and move to general availability
// through the documented management API (window.flagstaff.api); the rollout to everyone is
// the flag's own update, so approvals and the flag history apply.
"use strict";

(() => {
  const { api, showErrors, isChangeRequest, showHeld } = window.flagstaff;
  const projectId = document.querySelector('meta[name="project-id"]')?.content || "@current";
  const base = `/api/projects/${projectId}`;
  const features = `${base}/early_access_feature`;
  const problem = (error) => (error.attr ? `${error.attr}: ${error.message}` : error.message);
  const value = (form, name) => String(new FormData(form).get(name) || "").trim();

  function fields(form) {
    return {
      name: value(form, "name"),
      description: value(form, "description"),
      stage: value(form, "stage"),
      documentation_url: value(form, "documentation_url"),
    };
  }

  function setUpCreate(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = fields(form);
      if (value(form, "flag_source") === "existing") {
        body.feature_flag_id = Number(value(form, "feature_flag_id"));
      }
      try {
        const made = await api("POST", `${features}/`, body);
        window.location.assign(`/early_access/${made.id}`);
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
  }

  function setUpPage(facts) {
    const url = `${features}/${facts.dataset.featureId}/`;
    const flagId = facts.dataset.flagId;
    const edit = document.querySelector("form[data-feature-edit]");
    edit?.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await api("PATCH", url, fields(edit));
        window.location.reload();
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
    document.querySelector('[data-feature-action="ga"]')?.addEventListener("click", async () => {
      if (!window.confirm("Roll this feature's flag out to everyone?")) return;
      try {
        await api("PATCH", url, { stage: "general-availability" });
        const flag = await api("GET", `${base}/feature_flags/${flagId}/`);
        const filters = { ...flag.filters, groups: [{ properties: [], rollout_percentage: 100 }] };
        const saved = await api("PATCH", `${base}/feature_flags/${flagId}/`, { filters, active: true });
        if (isChangeRequest(saved)) {
          showHeld(saved);
          return;
        }
        window.location.reload();
      } catch (error) {
        showErrors([problem(error)]);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-feature-form]").forEach(setUpCreate);
    document.querySelectorAll("[data-feature-id]").forEach(setUpPage);
  });
})();
