// Ranks products the way WebShop's Pyserini 0.17 / Lucene 8 index does, for parity checks of the
// TypeScript search: Lucene's EnglishAnalyzer on the "contents" field, BM25(k1=0.9, b=0.4), a
// bag-of-words query where a repeated word is boosted by its count, ties broken by document id.
// usage: java -cp lucene-core-8.11.2.jar:lucene-analyzers-common-8.11.2.jar:. LuceneReference DOCS.tsv QUERIES.txt OUT.tsv K
//   DOCS.tsv: "id<TAB>contents" per line; QUERIES.txt: one query per line; OUT.tsv: "id:score id:score ..." per query.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.*;
import org.apache.lucene.index.*;
import org.apache.lucene.search.*;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.util.BytesRef;

public class LuceneReference {
  public static void main(String[] args) throws Exception {
    Analyzer analyzer = new EnglishAnalyzer();
    BM25Similarity similarity = new BM25Similarity(0.9f, 0.4f);
    ByteBuffersDirectory dir = new ByteBuffersDirectory();
    IndexWriterConfig config = new IndexWriterConfig(analyzer).setSimilarity(similarity);
    try (IndexWriter writer = new IndexWriter(dir, config)) {
      for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8)) {
        int tab = line.indexOf('\t');
        if (tab < 0) continue;
        String id = line.substring(0, tab);
        Document doc = new Document();
        doc.add(new StringField("id", id, Field.Store.YES));
        doc.add(new SortedDocValuesField("id", new BytesRef(id)));
        doc.add(new TextField("contents", line.substring(tab + 1), Field.Store.NO));
        writer.addDocument(doc);
      }
    }
    int k = Integer.parseInt(args[3]);
    Sort byScoreThenId = new Sort(SortField.FIELD_SCORE, new SortField("id", SortField.Type.STRING));
    try (IndexReader reader = DirectoryReader.open(dir);
         PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(args[2]), StandardCharsets.UTF_8))) {
      IndexSearcher searcher = new IndexSearcher(reader);
      searcher.setSimilarity(similarity);
      for (String query : Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8)) {
        Map<String, Integer> counts = new LinkedHashMap<>();
        try (TokenStream ts = analyzer.tokenStream("contents", query)) {
          CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
          ts.reset();
          while (ts.incrementToken()) counts.merge(term.toString(), 1, Integer::sum);
          ts.end();
        }
        BooleanQuery.Builder builder = new BooleanQuery.Builder();
        for (Map.Entry<String, Integer> e : counts.entrySet()) {
          builder.add(new BoostQuery(new TermQuery(new Term("contents", e.getKey())), e.getValue()), BooleanClause.Occur.SHOULD);
        }
        TopFieldDocs hits = searcher.search(builder.build(), k, byScoreThenId, true);
        StringBuilder line = new StringBuilder();
        for (ScoreDoc hit : hits.scoreDocs) {
          if (line.length() > 0) line.append(' ');
          line.append(searcher.doc(hit.doc).get("id")).append(':').append(hit.score);
        }
        out.println(line);
      }
    }
  }
}
