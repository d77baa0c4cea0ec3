"""An htmx fragment's URL opened as a page of its own (a bookmark, a link opened in a new tab): the fragment is
rendered inside the page layout, with its title and a link to the page that holds it, never as bare unstyled HTML."""

from django.template.response import TemplateResponse


def fragment_response(request, template, context, *, title, back_url, back_label):
    """The fragment itself for htmx; otherwise the same fragment in the layout (templates/fragment_page.html)."""
    if request.htmx:
        return TemplateResponse(request, template, context)
    return TemplateResponse(
        request,
        "fragment_page.html",
        {**context, "fragment": template, "fragment_title": title, "back_url": back_url, "back_label": back_label},
    )
