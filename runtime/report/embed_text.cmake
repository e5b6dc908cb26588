# runtime/report/embed_text.cmake — a text file as C source: `const char NAME[]`, its bytes
# and a NUL. Written as hexadecimal byte values, not a string literal: the text (a
# web page) may hold anything, and C11 promises string literals of 4095 characters
# only.
#   cmake -DINPUT=page.html -DOUTPUT=page.c -DNAME=symbol -P embed_text.cmake
file(READ ${INPUT} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUTPUT}.tmp "/* generated from ${INPUT} by embed_text.cmake: do not edit */\n"
     "extern const char ${NAME}[];\nconst char ${NAME}[] = {\n${bytes}0x00};\n")
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
