// The only script: "select the group" checkboxes on the dead page. Everything else works
// without JavaScript.
document.querySelectorAll("input.all").forEach(function (box) {
  box.addEventListener("change", function () {
    box.closest("table").querySelectorAll("input[name=job]").forEach(function (one) {
      one.checked = box.checked;
    });
  });
});
