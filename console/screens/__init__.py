"""Screens: the main screen and the modal dialogs (help, threshold, crash, no server)."""
