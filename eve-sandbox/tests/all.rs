mod isolate;
