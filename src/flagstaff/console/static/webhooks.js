// Flagstaff console: the webhooks page. Create (the secret is shown once), enable, disable,
// delete and redeliver through the documented management API (window.flagstaff.api).
"use strict";

(() => {
  const { api, showErrors } = window.flagstaff;
  const projectId = document.querySelector('meta[name="project-id"]')?.content || "@current";
  const hooks = `/api/projects/${projectId}/webhooks`;

  function setUpCreate(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const url = String(data.get("url") || "").trim();
      if (!url) {
        showErrors(["Webhook URL: a webhook needs a URL."]);
        return;
      }
      try {
        const made = await api("POST", `${hooks}/`, {
          url,
          description: String(data.get("description") || ""),
          scopes: data.getAll("scopes").map(String),
        });
        showErrors([]);
        const box = document.querySelector("[data-new-secret]");
        box.querySelector("[data-new-secret-value]").value = made.secret;
        box.hidden = false;
        box.querySelector("[data-new-secret-value]").select();
        form.reset();
      } catch (error) {
        showErrors([error.attr ? `${error.attr}: ${error.message}` : error.message]);
      }
    });
  }

  const ACTIONS = {
    "enable-webhook": (b) => api("PATCH", `${hooks}/${b.dataset.webhookId}/`, { enabled: true }),
    "disable-webhook": (b) => api("PATCH", `${hooks}/${b.dataset.webhookId}/`, { enabled: false }),
    "delete-webhook": (b) =>
      window.confirm("Delete this webhook and its deliveries?")
        ? api("DELETE", `${hooks}/${b.dataset.webhookId}/`)
        : null,
    redeliver: (b) =>
      api("POST", `${hooks}/${b.dataset.webhookId}/deliveries/${b.dataset.deliveryId}/redeliver/`, {}),
  };

  function setUpList(section) {
    section.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-action]");
      const action = button && ACTIONS[button.dataset.action];
      if (!action) return;
      try {
        const done = action(button);
        if (done === null) return;
        await done;
        window.location.reload();
      } catch (error) {
        showErrors([error.message]);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("form[data-create-webhook]").forEach(setUpCreate);
    document.querySelectorAll("[data-webhooks]").forEach(setUpList);
  });
})();
