"""The results page: rows from run records + rulings (local) and the remote rows file,
rendered between the page's markers, and its Scoring cells checked."""
