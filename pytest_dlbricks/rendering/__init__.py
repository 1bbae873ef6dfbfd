"""Text for people: the terminal's tables and lines, the HTML page, the formats they share."""
