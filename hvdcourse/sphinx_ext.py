"""Sphinx extension for the course's book (``_config.yml`` loads it).

Jupyter Book 1.x registers sphinx-thebe's and sphinx-togglebutton's inline configuration scripts
twice (once with filename ``None``, once with ``''``), which makes every page throw "Identifier
'THEBE_JS_URL' has already been declared" in the browser; this drops such duplicates.
"""


def _script_key(script) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    return (getattr(script, "filename", None) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
