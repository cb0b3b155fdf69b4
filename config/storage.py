"""Static files in production: hashed names, compressed, and ES module imports rewritten to
the hashed names too, so a browser never mixes a new editor module with a cached old one."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    support_js_module_import_aggregation = True

    def url_converter(self, name, hashed_files, template=None):
        convert = super().url_converter(name, hashed_files, template)
        if not name.endswith(".js") or name.startswith("js/"):
            return convert

        def lenient(matchobj):
            # Third-party scripts (django-htmx's extensions) import names that are not static
            # files, e.g. a bare "htmx": their imports are left as they are.
            try:
                return convert(matchobj)
            except ValueError:
                return matchobj.group(0)

        return lenient
