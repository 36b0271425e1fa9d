"""The engine benchmark (``make bench``): our engine against pdfimpose and a plain page copy."""
